package e2e

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// This file reads kernel state with the operator's tools (tc, bpftool, ip),
// so the suite checks what an operator would see, not dpd's own view.

// tool runs an operator tool and returns its stdout. The error carries
// stderr, or stdout when stderr is empty: bpftool -j reports its errors as
// JSON on stdout.
func tool(name string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		why := strings.TrimSpace(stderr.String())
		if why == "" {
			why = strings.TrimSpace(stdout.String())
		}
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, why)
	}
	return stdout.Bytes(), nil
}

// TCFilters returns the output of `tc filter show dev ifname <dir>` (dir is
// "ingress" or "egress"); empty means no filter on that hook.
func TCFilters(ifname, dir string) (string, error) {
	out, err := tool("tc", "filter", "show", "dev", ifname, dir)
	return strings.TrimSpace(string(out)), err
}

// NetProg is one program attachment reported by `bpftool net show`.
type NetProg struct {
	Kind   string `json:"kind"` // "tcx/ingress", "clsact/egress", ...
	Name   string `json:"name"`
	ProgID int    `json:"prog_id"`
}

// BPFNet lists every tc/tcx/xdp attachment on ifname.
func BPFNet(ifname string) ([]NetProg, error) {
	out, err := tool("bpftool", "-j", "net", "show", "dev", ifname)
	if err != nil {
		return nil, err
	}
	var sections []map[string]json.RawMessage
	if err := json.Unmarshal(out, &sections); err != nil {
		return nil, fmt.Errorf("parse bpftool net output %q: %w", out, err)
	}
	var progs []NetProg
	for _, sec := range sections {
		for _, kind := range []string{"tc", "xdp"} {
			raw, ok := sec[kind]
			if !ok {
				continue
			}
			var ps []NetProg
			if err := json.Unmarshal(raw, &ps); err != nil {
				return nil, fmt.Errorf("parse bpftool %s section: %w", kind, err)
			}
			progs = append(progs, ps...)
		}
	}
	return progs, nil
}

// TCXProgs lists the programs on ifindex's TCX hooks, asked of the kernel
// directly: bpftool before v7.3 (Debian 12 ships 7.1) does not show TCX in
// `bpftool net show`.
func TCXProgs(ifindex int) ([]NetProg, error) {
	var progs []NetProg
	for _, h := range []struct {
		kind   string
		attach ebpf.AttachType
	}{{"tcx/ingress", ebpf.AttachTCXIngress}, {"tcx/egress", ebpf.AttachTCXEgress}} {
		res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: h.attach})
		if err != nil {
			return nil, fmt.Errorf("query %s of ifindex %d: %w", h.kind, ifindex, err)
		}
		for _, p := range res.Programs {
			np := NetProg{Kind: h.kind, ProgID: int(p.ID)}
			if prog, err := ebpf.NewProgramFromID(p.ID); err == nil {
				if info, err := prog.Info(); err == nil {
					np.Name = info.Name
				}
				_ = prog.Close()
			}
			progs = append(progs, np)
		}
	}
	return progs, nil
}

// LinkPins lists the TCX link pins dpd keeps for ifname under
// pinDir/links/ (named <ifname>_<hook>).
func LinkPins(pinDir, ifname string) ([]string, error) {
	pins, err := filepath.Glob(filepath.Join(pinDir, "links", ifname+"_*"))
	if err != nil {
		return nil, fmt.Errorf("glob link pins: %w", err)
	}
	return pins, nil
}

// RouteTo returns `ip route show <ip>` (exact /32 or /128 match), empty
// when none.
func RouteTo(ip string) (string, error) {
	fam := "-4"
	if strings.Contains(ip, ":") {
		fam = "-6"
	}
	out, err := tool("ip", fam, "route", "show", ip)
	return strings.TrimSpace(string(out)), err
}

// IfStateKeys dumps the pinned dpd_ifstate map (keyed by u32 ifindex).
func IfStateKeys(pinDir string) (map[int]bool, error) {
	states, err := IfStates(pinDir)
	if err != nil {
		return nil, err
	}
	keys := map[int]bool{}
	for k := range states {
		keys[k] = true
	}
	return keys, nil
}

// IfStates dumps the pinned dpd_ifstate map: the flags of each ifindex's
// entry (struct dpd_ifstate is u32 slot, u32 flags).
func IfStates(pinDir string) (map[int]uint32, error) {
	path := filepath.Join(pinDir, "dpd_ifstate")
	out, err := tool("bpftool", "-j", "map", "dump", "pinned", path)
	if err != nil {
		return nil, err
	}
	var entries []struct {
		Key   []string `json:"key"`
		Value []string `json:"value"`
	}
	if err := json.Unmarshal(out, &entries); err != nil {
		return nil, fmt.Errorf("parse dump of %s: %w", path, err)
	}
	states := map[int]uint32{}
	for _, e := range entries {
		if len(e.Key) != 4 || len(e.Value) != 8 {
			return nil, fmt.Errorf("dpd_ifstate entry has a %d-byte key and a %d-byte value, want 4 and 8", len(e.Key), len(e.Value))
		}
		k, err := hexBytes(e.Key)
		if err != nil {
			return nil, err
		}
		v, err := hexBytes(e.Value)
		if err != nil {
			return nil, err
		}
		states[int(binary.NativeEndian.Uint32(k))] = binary.NativeEndian.Uint32(v[4:])
	}
	return states, nil
}

// hexBytes decodes bpftool's "0x.." byte strings.
func hexBytes(hs []string) ([]byte, error) {
	b := make([]byte, len(hs))
	for i, h := range hs {
		v, err := strconv.ParseUint(strings.TrimPrefix(h, "0x"), 16, 8)
		if err != nil {
			return nil, fmt.Errorf("parse byte %q: %w", h, err)
		}
		b[i] = byte(v)
	}
	return b, nil
}

// Attachment is everything of dpd that is visible on one interface.
type Attachment struct {
	TCIngress, TCEgress string
	Progs               []NetProg
	LinkPins            []string
	Route               string
	IfState             bool
	IfReady             bool     // the ifstate entry says READY (policed); without it, everything drops
	Errs                []string // tools that failed; what they cover is unknown
}

// Observe collects the Attachment of w under pinDir. A failing tool is
// recorded in Errs rather than aborting, so one report shows everything.
func Observe(pinDir string, w *Workload) Attachment {
	var a Attachment
	note := func(err error) {
		if err != nil {
			a.Errs = append(a.Errs, err.Error())
		}
	}
	var err error
	a.TCIngress, err = TCFilters(w.HostIface, "ingress")
	note(err)
	a.TCEgress, err = TCFilters(w.HostIface, "egress")
	note(err)
	a.Progs, err = BPFNet(w.HostIface)
	note(err)
	tcx, err := TCXProgs(w.Ifindex)
	note(err)
	a.Progs = mergeProgs(a.Progs, tcx)
	a.LinkPins, err = LinkPins(pinDir, w.HostIface)
	note(err)
	a.Route, err = RouteTo(w.IP)
	note(err)
	states, err := IfStates(pinDir)
	note(err)
	flags, ok := states[w.Ifindex]
	a.IfState, a.IfReady = ok, ok && flags&abi.IfReady != 0
	return a
}

// mergeProgs adds the TCX programs a newer bpftool may have listed already.
func mergeProgs(net, tcx []NetProg) []NetProg {
	seen := map[string]bool{}
	for _, p := range net {
		seen[fmt.Sprint(p.Kind, p.ProgID)] = true
	}
	for _, p := range tcx {
		if !seen[fmt.Sprint(p.Kind, p.ProgID)] {
			net = append(net, p)
		}
	}
	return net
}

// String renders the attachment for failure messages.
func (a Attachment) String() string {
	s := fmt.Sprintf("tc ingress=%q tc egress=%q progs=%+v link pins=%v route=%q ifstate=%v ready=%v",
		a.TCIngress, a.TCEgress, a.Progs, a.LinkPins, a.Route, a.IfState, a.IfReady)
	if len(a.Errs) > 0 {
		s += " errors=" + strings.Join(a.Errs, "; ")
	}
	return s
}
