package nl

import (
	"bytes"
	"fmt"

	vnl "github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// LinkRef is a link's name and index.
type LinkRef struct {
	Name  string
	Index int
}

// rtextFilterSkipStats asks the kernel to leave the counters out of a link
// dump (RTEXT_FILTER_SKIP_STATS; older kernels ignore it).
const rtextFilterSkipStats = 1 << 3

// ListLinkRefs lists the name and index of every link in the calling
// goroutine's network namespace, retrying a dump the kernel flagged
// interrupted; one still interrupted after the retries is an error, never
// taken as complete. It reads the two fields as the dump streams in:
// the library's LinkList parses every attribute of every link and holds
// the whole dump until it returns (~6 MiB live for 2,000 veths), which
// the sweep after the first apply paid at the end of a cold start, when
// the live heap is at its largest.
func ListLinkRefs() ([]LinkRef, error) {
	refs, err := retryDump(dumpLinkRefs)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	return refs, nil
}

func dumpLinkRefs() ([]LinkRef, error) {
	req := vnl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_DUMP)
	req.AddData(vnl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(vnl.NewRtAttr(unix.IFLA_EXT_MASK, vnl.Uint32Attr(rtextFilterSkipStats)))
	var out []LinkRef
	err := req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWLINK, func(m []byte) bool {
		if len(m) < unix.SizeofIfInfomsg {
			return true
		}
		if name := linkName(m[unix.SizeofIfInfomsg:]); name != "" {
			out = append(out, LinkRef{Name: name, Index: int(vnl.DeserializeIfInfomsg(m).Index)})
		}
		return true
	})
	return out, err
}

// linkName finds IFLA_IFNAME among a link message's attributes without
// parsing the others.
func linkName(b []byte) string {
	for len(b) >= unix.SizeofRtAttr {
		n := int(vnl.NativeEndian().Uint16(b[0:2]))
		if n < unix.SizeofRtAttr || n > len(b) {
			return ""
		}
		if vnl.NativeEndian().Uint16(b[2:4]) == unix.IFLA_IFNAME {
			return string(bytes.TrimRight(b[unix.SizeofRtAttr:n], "\x00"))
		}
		b = b[min((n+unix.RTA_ALIGNTO-1)&^(unix.RTA_ALIGNTO-1), len(b)):]
	}
	return ""
}
