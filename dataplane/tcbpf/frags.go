package tcbpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// DropReason names a dpd_drop_ctrs slot: packets the entry programs drop
// for a reason no rule counts.
type DropReason uint32

// The drop reasons, mirrored from dpd_abi.h.
const (
	DropFragNoFirst DropReason = abi.DropFragNoFirst // non-first fragment whose first piece this hook did not see
	DropFragTiny    DropReason = abi.DropFragTiny    // TCP fragment at offset 8 (RFC 1858)
	DropIPv6Ext     DropReason = abi.DropIPv6Ext     // IPv6 packet with more extension headers than the walk's bound
	DropCTFull      DropReason = abi.DropCTFull      // allowed new flow refused: the conntrack map is full
)

// String is the reason's metric label.
func (r DropReason) String() string {
	switch r {
	case DropFragNoFirst:
		return "fragment_without_first"
	case DropFragTiny:
		return "fragment_tiny_tcp"
	case DropIPv6Ext:
		return "ipv6_too_many_ext_headers"
	case DropCTFull:
		return "conntrack_full"
	}
	return fmt.Sprintf("reason_%d", uint32(r))
}

// DropReasons lists the reasons the programs count.
func DropReasons() []DropReason {
	return []DropReason{DropFragNoFirst, DropFragTiny, DropIPv6Ext, DropCTFull}
}

// ReadDrops sums the per-CPU counters of a drop reason.
func (d *Datapath) ReadDrops(r DropReason) (packets, bytes uint64, err error) {
	if r >= abi.DropMax {
		return 0, 0, fmt.Errorf("drop reason %d out of range", uint32(r))
	}
	var per []bpf.DpdDpdCounter
	if err := d.objs.DpdDropCtrs.Lookup(uint32(r), &per); err != nil {
		return 0, 0, fmt.Errorf("read drop counter %s: %w", r, err)
	}
	for _, c := range per {
		packets += c.Packets
		bytes += c.Bytes
	}
	return packets, bytes, nil
}

// FragmentEntries counts the datagrams dpd_frags remembers (one per hook
// that saw a first fragment), in batches where the kernel has them. The
// map is small (8192 by default) and only the programs write it.
func (d *Datapath) FragmentEntries() (int, error) {
	const batch = 4096
	keys := make([]bpf.DpdDpdFragKey, batch)
	vals := make([]bpf.DpdDpdFragVal, batch)
	var cur ebpf.MapBatchCursor
	entries := 0
	for first := true; ; first = false {
		n, err := d.objs.DpdFrags.BatchLookup(&cur, keys, vals, nil)
		entries += n
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return entries, nil
		case first && errors.Is(err, ebpf.ErrNotSupported):
			return d.countFragsByKey()
		case err != nil:
			return entries, fmt.Errorf("count fragments: %w", err)
		}
	}
}

func (d *Datapath) countFragsByKey() (int, error) {
	n := 0
	var k bpf.DpdDpdFragKey
	it := d.objs.DpdFrags.Iterate()
	var v bpf.DpdDpdFragVal
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		return n, fmt.Errorf("count fragments: %w", err)
	}
	return n, nil
}
