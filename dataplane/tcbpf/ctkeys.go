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
	ctSwap(&k)
	return k, abi.CTFOrigHi
}

// ctSwap turns a key to the other end's view: addresses, ports (but for
// ICMP echo's identifier) and the hook's direction.
func ctSwap(k *CTKey) {
	k.Saddr, k.Daddr = k.Daddr, k.Saddr
	if !ctIsICMP(k.Proto) {
		k.Sport, k.Dport = k.Dport, k.Sport
	}
	k.Dir ^= 1
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

// CTLegacyKey reports whether k is a key of a dpd before normalized keys
// (only ever in an older dpd's dpd_ct): the scan that moves the entry
// gives it another key.
func CTLegacyKey(k *CTKey) bool { return ctLegacy(k) }

// ctLegacy reports whether the entry is one only the legacy lookup finds:
// a flow key a dpd before normalized keys wrote for a tuple from its
// higher end.
func ctLegacy(k *ctKey) bool {
	return k.Dir != abi.DirNAT && ctNeedsSwap(&k.Saddr, &k.Daddr, k.Sport, k.Dport, k.Proto)
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
