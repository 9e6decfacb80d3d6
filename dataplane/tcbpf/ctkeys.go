package tcbpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Flow keys are normalized the way bpf/dpd_ct.h does it: the end with the
// lower address (then, but for ICMP echo, the lower port) first, and the
// approving hook's direction flipped when that swapped the tuple, so that
// a flow and its replies at one interface share one key. The value's
// CTFOrigHi flag says which end sent the first packet.

// ctAddrCmp orders addresses as the programs do: four 32-bit words in
// network order.
func ctAddrCmp(a, b *[16]byte) int {
	for i := 0; i < 16; i += 4 {
		x, y := binary.BigEndian.Uint32(a[i:]), binary.BigEndian.Uint32(b[i:])
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
	}
	return 0
}

func ctIsICMP(proto uint8) bool { return proto == unix.IPPROTO_ICMP || proto == unix.IPPROTO_ICMPV6 }

// ctNeedsSwap reports whether a tuple is not in normalized order.
func ctNeedsSwap(saddr, daddr *[16]byte, sport, dport uint16, proto uint8) bool {
	c := ctAddrCmp(saddr, daddr)
	return c > 0 || (c == 0 && !ctIsICMP(proto) && sport > dport)
}

// CTFlowKey is the key of the entry hook dir of ifindex creates when it
// allows a packet src -> dst, and the flags (CTFOrigHi or 0) its value
// carries.
func CTFlowKey(src, dst netip.AddrPort, proto, dir uint8, ifindex uint32) (CTKey, uint32) {
	src, dst = netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	k := CTKey{Saddr: src.Addr().As16(), Daddr: dst.Addr().As16(), Sport: src.Port(), Dport: dst.Port(),
		Proto: proto, Dir: dir, Family: abi.CTFamily(src.Addr().Is6()),
		Ifindex: ifindex}
	if src.Addr().Is4() {
		// IPv4 sits in the first 4 bytes, the rest zero.
		k.Saddr, k.Daddr = [16]byte{}, [16]byte{}
		a, b := src.Addr().As4(), dst.Addr().As4()
		copy(k.Saddr[:], a[:])
		copy(k.Daddr[:], b[:])
	}
	if !ctNeedsSwap(&k.Saddr, &k.Daddr, k.Sport, k.Dport, proto) {
		return k, 0
	}
	k.Saddr, k.Daddr = k.Daddr, k.Saddr
	if !ctIsICMP(proto) {
		k.Sport, k.Dport = k.Dport, k.Sport
	}
	k.Dir ^= 1
	return k, abi.CTFOrigHi
}

// CTFlow is a flow entry as its approving hook saw the flow's first
// packet: source, destination and that hook's direction.
type CTFlow struct {
	Saddr, Daddr [16]byte
	Sport, Dport uint16
	Dir          uint8
}

// FlowOf undoes the normalization of a flow entry's key. Entries of a dpd
// before normalized keys have no CTFOrigHi and read as they were written.
func FlowOf(k *CTKey, v *CTVal) CTFlow {
	if k.Dir == abi.DirNAT || v.Flags&abi.CTFOrigHi == 0 {
		return CTFlow{Saddr: k.Saddr, Daddr: k.Daddr, Sport: k.Sport, Dport: k.Dport, Dir: k.Dir}
	}
	f := CTFlow{Saddr: k.Daddr, Daddr: k.Saddr, Sport: k.Dport, Dport: k.Sport, Dir: k.Dir ^ 1}
	if ctIsICMP(k.Proto) {
		f.Sport, f.Dport = k.Sport, k.Dport
	}
	return f
}

// ctLegacy reports whether the entry is one only the legacy lookup finds:
// a flow key a dpd before normalized keys wrote for a tuple from its
// higher end.
func ctLegacy(k *ctKey) bool {
	return k.Dir != abi.DirNAT && ctNeedsSwap(&k.Saddr, &k.Daddr, k.Sport, k.Dport, k.Proto)
}

// setCTCfg writes dpd_ct_cfg's flags (abi.CTCfg*).
func (d *Datapath) setCTCfg(flags uint32) error {
	cfg := bpf.DpdDpdCtCfg{Flags: flags}
	if err := d.objs.DpdCtCfg.Update(uint32(0), &cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write %s: %w", abi.MapCTCfg, err)
	}
	d.ctFlags.Store(flags)
	d.ctClean.Store(0)
	return nil
}

// initCTLegacy sets the legacy flags before anything of this Datapath can
// write or read an entry (the epilogue it installs is shared with the
// entry programs already attached): entry programs of a dpd before
// normalized keys still running mean entries are written the old way as
// well; any entry or interface state on the node means old entries may be
// there. Only a node without either starts with both off. A doubt about
// the attached programs counts as their being old.
func (d *Datapath) initCTLegacy() error {
	var k ctKey
	var ifindex uint32
	errCT := d.objs.DpdCt.NextKey(nil, &k)
	errIf := d.objs.DpdIfstate.NextKey(nil, &ifindex)
	if errors.Is(errCT, ebpf.ErrKeyNotExist) && errors.Is(errIf, ebpf.ErrKeyNotExist) {
		return d.setCTCfg(0)
	}
	flags := uint32(abi.CTCfgLegacy)
	stale, err := d.staleEntryPrograms()
	if err != nil {
		d.log.Warn("cannot tell whether older entry programs run; writing conntrack entries they read", "err", err)
	}
	if err != nil || stale > 0 {
		flags |= abi.CTCfgWriteLegacy
	}
	return d.setCTCfg(flags)
}

// ctCleanScans is how many scans in a row must find no legacy entry and no
// older entry program before the legacy lookup goes: an older program
// replaced between one scan's walk and its program check may have written
// an entry the walk missed, which the next walk sees.
const ctCleanScans = 2

// retireCTLegacy is the scan's end (legacy: the legacy entries it found).
// Once no older entry program runs, entries are written normalized only;
// once ctCleanScans scans in a row found neither, the legacy lookup goes.
// Any doubt keeps it, which costs a new flow one more lookup, where going
// early could drop replies. Failures are logged, not returned: the scan's
// own work is done.
func (d *Datapath) retireCTLegacy(legacy int) {
	flags := d.ctFlags.Load()
	if flags == 0 {
		return
	}
	stale, err := d.staleEntryPrograms()
	if err != nil {
		d.ctClean.Store(0)
		d.log.Warn("conntrack scan: cannot tell whether older entry programs run; keeping legacy keys", "err", err)
		return
	}
	if stale > 0 || legacy > 0 {
		d.ctClean.Store(0)
		if stale == 0 && flags&abi.CTCfgWriteLegacy != 0 {
			err = d.setCTCfg(abi.CTCfgLegacy)
		}
	} else if d.ctClean.Add(1) >= ctCleanScans {
		err = d.setCTCfg(0)
	}
	if err != nil {
		d.log.Warn("conntrack scan: legacy keys", "err", err)
	}
}

// staleEntryPrograms counts the interfaces in dpd_ifstate running a dpd
// entry program that is not one of this Datapath's current ones.
func (d *Datapath) staleEntryPrograms() (int, error) {
	var ifindex uint32
	var st bpf.DpdDpdIfstate
	stale := 0
	it := d.objs.DpdIfstate.Iterate()
	for it.Next(&ifindex, &st) {
		attached, err := d.attachedPrograms(int(ifindex)) // none when the interface is gone
		if err != nil {
			return 0, err
		}
		for _, pid := range attached {
			if !d.isCurrentEntry(pid) {
				stale++
				break
			}
		}
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("walk %s: %w", abi.MapIfState, err)
	}
	return stale, nil
}

// isCurrentEntry: the program is one of this Datapath's entry programs, or
// not a dpd entry program at all.
func (d *Datapath) isCurrentEntry(pid ebpf.ProgramID) bool {
	if d.ownIDs[pid] {
		return true
	}
	id, err := attachedIdentity(pid)
	if err != nil {
		return errors.Is(err, os.ErrNotExist) // detached meanwhile
	}
	if !isEntryName(id.name) {
		return true
	}
	for p := range d.want {
		if d.isCurrent(pid, p) {
			return true
		}
	}
	return false
}
