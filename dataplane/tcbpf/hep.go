package tcbpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// entryFor is the program of hook h: the workload entry programs, or with
// host the host endpoint's (TC ingress carries traffic to the host, the
// host endpoint's ingress policy).
func (d *Datapath) entryFor(h hook, host bool) *ebpf.Program {
	if host {
		if h.tcx == ebpf.AttachTCXIngress {
			return d.objs.DpdHepIn
		}
		return d.objs.DpdHepOut
	}
	p, _ := d.entryProgram(h.dir)
	return p
}

// Failsafe is one failsafe port: traffic of Proto to Port, from (inbound)
// or to (outbound) an address in Net, passes host interfaces before any
// host endpoint policy.
type Failsafe struct {
	Inbound bool
	Proto   uint8 // 6 TCP, 17 UDP
	Port    uint16
	Net     netip.Prefix // IPv4 (0.0.0.0/0 for any) or IPv6 (::/0 for any)
}

// failsafeKey is f's key in its family's map: dpd_failsafes (IPv4) or
// dpd_failsafes6, whose key is the IPv4 one with a 16-byte address.
func failsafeKey(f Failsafe) (key []byte, v6 bool, err error) {
	if !f.Net.IsValid() {
		return nil, false, fmt.Errorf("failsafe %+v: no net", f)
	}
	n := f.Net.Masked()
	v6 = n.Addr().Is6() && !n.Addr().Is4In6()
	k := make([]byte, abi.FailsafeKeySize, abi.FailsafeKey6Size)
	binary.NativeEndian.PutUint32(k[abi.FailsafeKeyPrefixlen:], uint32(abi.FSKeyFixedBits+n.Bits()))
	binary.NativeEndian.PutUint16(k[abi.FailsafeKeyPort:], f.Port)
	k[abi.FailsafeKeyProto] = f.Proto
	k[abi.FailsafeKeyFlags] = abi.FSOutbound
	if f.Inbound {
		k[abi.FailsafeKeyFlags] = abi.FSInbound
	}
	if !v6 {
		if !n.Addr().Is4() {
			return nil, false, fmt.Errorf("failsafe %v: an IPv4-mapped net; write it as IPv4", f.Net)
		}
		a := n.Addr().As4()
		copy(k[abi.FailsafeKeyAddr:], a[:])
		return k, false, nil
	}
	a := n.Addr().As16()
	return append(k[:abi.FailsafeKeyAddr], a[:]...), true, nil
}

// failsafeMaps are the failsafe maps, IPv4 first.
func (d *Datapath) failsafeMaps() [2]*ebpf.Map {
	return [2]*ebpf.Map{d.objs.DpdFailsafes, d.objs.DpdFailsafes6}
}

// SetFailsafes makes dpd_failsafes and dpd_failsafes6 hold exactly fs: the
// new entries are added before the old ones go, so a port in both never
// closes. An invalid entry fails the call before anything is written.
func (d *Datapath) SetFailsafes(fs []Failsafe) error {
	var want [2]map[string]bool
	for fam := range want {
		want[fam] = map[string]bool{}
	}
	for _, f := range fs {
		k, v6, err := failsafeKey(f)
		if err != nil {
			return err
		}
		if v6 {
			want[1][string(k)] = true
		} else {
			want[0][string(k)] = true
		}
	}
	maps := d.failsafeMaps()
	one := uint32(1)
	for fam, m := range maps {
		for k := range want[fam] {
			if err := m.Update([]byte(k), one, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("write failsafe to %s: %w", m.String(), err)
			}
		}
	}
	for fam, m := range maps {
		keys, err := failsafeKeys(m)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if want[fam][string(k)] {
				continue
			}
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("delete failsafe: %w", err)
			}
		}
	}
	return nil
}

// failsafeKeys lists the keys of one failsafe map.
func failsafeKeys(m *ebpf.Map) ([][]byte, error) {
	var out [][]byte
	var k []byte
	var v uint32
	it := m.Iterate()
	for it.Next(&k, &v) {
		out = append(out, append([]byte(nil), k...))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read failsafes: %w", err)
	}
	return out, nil
}

// Failsafes lists dpd_failsafes and dpd_failsafes6.
func (d *Datapath) Failsafes() ([]Failsafe, error) {
	var out []Failsafe
	for _, m := range d.failsafeMaps() {
		keys, err := failsafeKeys(m)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			bits := int(binary.NativeEndian.Uint32(k[abi.FailsafeKeyPrefixlen:])) - abi.FSKeyFixedBits
			var addr netip.Addr
			if len(k) == abi.FailsafeKey6Size {
				addr = netip.AddrFrom16([16]byte(k[abi.FailsafeKeyAddr:]))
			} else {
				addr = netip.AddrFrom4([4]byte(k[abi.FailsafeKeyAddr : abi.FailsafeKeyAddr+4]))
			}
			out = append(out, Failsafe{
				Inbound: k[abi.FailsafeKeyFlags] == abi.FSInbound,
				Proto:   k[abi.FailsafeKeyProto],
				Port:    binary.NativeEndian.Uint16(k[abi.FailsafeKeyPort:]),
				Net:     netip.PrefixFrom(addr, bits),
			})
		}
	}
	return out, nil
}

// installHepContinuations puts the host entry programs' continuations at
// their dpd_jump entries, leaving equivalent ones a restart finds.
func (d *Datapath) installHepContinuations() error {
	for idx, p := range map[uint32]*ebpf.Program{
		abi.JumpHepContFromWEP: d.objs.DpdHepOutCont,
		abi.JumpHepContToWEP:   d.objs.DpdHepInCont,
	} {
		var cur uint32
		if err := d.objs.DpdJump.Lookup(idx, &cur); err == nil && d.isCurrent(ebpf.ProgramID(cur), p) {
			continue
		}
		if err := d.objs.DpdJump.Update(idx, p, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("install host entry continuation %d: %w", idx, err)
		}
	}
	return nil
}

// HepStages are a host interface's untracked and pre-DNAT policy slots,
// each 1 + slot (0: none).
type HepStages struct {
	Untracked, PreDNAT uint32
}

// SetHepStages writes ifindex's stage slots; all zero deletes the entry.
func (d *Datapath) SetHepStages(ifindex int, s HepStages) error {
	if s == (HepStages{}) {
		return d.DeleteHepStages(ifindex)
	}
	v := [2]uint32{s.Untracked, s.PreDNAT}
	if err := d.objs.DpdHepStages.Update(uint32(ifindex), v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("host stages %d: %w", ifindex, err)
	}
	return nil
}

// DeleteHepStages removes ifindex's stage slots; none is not an error.
func (d *Datapath) DeleteHepStages(ifindex int) error {
	err := d.objs.DpdHepStages.Delete(uint32(ifindex))
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete host stages %d: %w", ifindex, err)
	}
	return nil
}

// AllHepStages reads every entry of dpd_hep_stages.
func (d *Datapath) AllHepStages() (map[int]HepStages, error) {
	out := map[int]HepStages{}
	var k uint32
	var v [2]uint32
	it := d.objs.DpdHepStages.Iterate()
	for it.Next(&k, &v) {
		out[int(k)] = HepStages{Untracked: v[0], PreDNAT: v[1]}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", abi.MapHepStages, err)
	}
	return out, nil
}

// SetToHostAction writes DefaultEndpointToHostAction (abi.ToHost*) and,
// for Return, 1 + the slot of the wildcard host endpoint's ingress policy
// (0: none).
func (d *Datapath) SetToHostAction(action, slot uint32) error {
	if err := d.objs.DpdHepCfg.Update(uint32(0), [2]uint32{action, slot}, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write %s: %w", abi.MapHepCfg, err)
	}
	return nil
}

// ToHostAction reads what SetToHostAction wrote.
func (d *Datapath) ToHostAction() (action, slot uint32, err error) {
	var v [2]uint32
	if err := d.objs.DpdHepCfg.Lookup(uint32(0), &v); err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", abi.MapHepCfg, err)
	}
	return v[0], v[1], nil
}
