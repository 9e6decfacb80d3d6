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
	Net     netip.Prefix // IPv4; 0.0.0.0/0 for any
}

func failsafeKey(f Failsafe) ([abi.FailsafeKeySize]byte, error) {
	var k [abi.FailsafeKeySize]byte
	if !f.Net.Addr().Is4() {
		return k, fmt.Errorf("failsafe %v: only IPv4 is policed on host interfaces", f.Net)
	}
	n := f.Net.Masked()
	binary.NativeEndian.PutUint32(k[abi.FailsafeKeyPrefixlen:], uint32(abi.FSKeyFixedBits+n.Bits()))
	binary.NativeEndian.PutUint16(k[abi.FailsafeKeyPort:], f.Port)
	k[abi.FailsafeKeyProto] = f.Proto
	k[abi.FailsafeKeyFlags] = abi.FSOutbound
	if f.Inbound {
		k[abi.FailsafeKeyFlags] = abi.FSInbound
	}
	a := n.Addr().As4()
	copy(k[abi.FailsafeKeyAddr:], a[:])
	return k, nil
}

// SetFailsafes makes dpd_failsafes hold exactly fs: the new entries are
// added before the old ones go, so a port in both never closes.
func (d *Datapath) SetFailsafes(fs []Failsafe) error {
	m := d.objs.DpdFailsafes
	want := map[[abi.FailsafeKeySize]byte]bool{}
	one := uint32(1)
	for _, f := range fs {
		k, err := failsafeKey(f)
		if err != nil {
			return err
		}
		want[k] = true
		if err := m.Update(k[:], one, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("failsafe %+v: %w", f, err)
		}
	}
	var k [abi.FailsafeKeySize]byte
	var v uint32
	var stale [][abi.FailsafeKeySize]byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", abi.MapFailsafes, err)
	}
	for _, k := range stale {
		if err := m.Delete(k[:]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete failsafe: %w", err)
		}
	}
	return nil
}

// Failsafes lists dpd_failsafes.
func (d *Datapath) Failsafes() ([]Failsafe, error) {
	var out []Failsafe
	var k [abi.FailsafeKeySize]byte
	var v uint32
	it := d.objs.DpdFailsafes.Iterate()
	for it.Next(&k, &v) {
		bits := int(binary.NativeEndian.Uint32(k[abi.FailsafeKeyPrefixlen:])) - abi.FSKeyFixedBits
		addr := netip.AddrFrom4([4]byte(k[abi.FailsafeKeyAddr : abi.FailsafeKeyAddr+4]))
		out = append(out, Failsafe{
			Inbound: k[abi.FailsafeKeyFlags] == abi.FSInbound,
			Proto:   k[abi.FailsafeKeyProto],
			Port:    binary.NativeEndian.Uint16(k[abi.FailsafeKeyPort:]),
			Net:     netip.PrefixFrom(addr, bits),
		})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", abi.MapFailsafes, err)
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
