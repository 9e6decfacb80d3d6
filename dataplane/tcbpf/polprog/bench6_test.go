package polprog

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/model"
)

func cidr6Addr(i int) netip.Addr {
	return netip.AddrFrom16([16]byte{0xfd, 0, 0, 1, 12: 0, 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)})
}

func set6Addr(i int) netip.Addr {
	return netip.AddrFrom16([16]byte{0xfd, 0, 0, 2, 14: byte(i >> 8), 15: byte(i)})
}

// BenchmarkPolicy6 is BenchmarkPolicy's new-flow rows for IPv6 packets:
// the last of 1,000 /128 source rules and of 100 rules on IPv6 sets (one
// /128 member each), with the ratio to a bare "return 0" program.
func BenchmarkPolicy6(b *testing.B) {
	h := newHarness(b)
	h.productionEpilogue(b)
	var noopNs float64
	bench := func(b *testing.B, prog *ebpf.Program, p pkt, want uint32) {
		h.t = b
		h.setState(p)
		ret, d, err := prog.Benchmark(frame, b.N, b.ResetTimer)
		if err != nil || ret != want {
			b.Fatalf("ret %d err %v, want %d", ret, err, want)
		}
		ns := float64(d.Nanoseconds())
		b.ReportMetric(ns, "ns/op")
		if noopNs > 0 {
			b.ReportMetric(ns/noopNs, "x_noop")
		} else {
			noopNs = ns
		}
	}
	noop, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "Dual BSD/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		b.Fatal(err)
	}
	defer noop.Close()
	b.Run("noop", func(b *testing.B) {
		noopNs = 0
		bench(b, noop, tcp("fd00::1", "fd00::2", 1, 1), 0)
	})
	if noopNs == 0 {
		b.Fatal("noop did not run")
	}
	sets := resolver{}
	h.bulk = true
	for i := range 100 {
		sets[fmt.Sprintf("s%d", i)] = uint32(20 + i)
		h.addMember(uint32(20+i), netip.PrefixFrom(set6Addr(i), 128), 0, 0)
	}
	h.bulk = false
	h.rebuildIndex()
	cidr := make([]model.Rule, 1000)
	for i := range cidr {
		cidr[i] = model.Rule{Action: model.ActionDeny, SrcNets: []netip.Prefix{netip.PrefixFrom(cidr6Addr(i), 128)}}
	}
	cidr[len(cidr)-1].Action = model.ActionAllow
	setRules := make([]model.Rule, 100)
	for i := range setRules {
		setRules[i] = model.Rule{Action: model.ActionDeny, SrcIPSets: []string{fmt.Sprintf("s%d", i)}}
	}
	setRules[len(setRules)-1].Action = model.ActionAllow
	for _, k := range []struct {
		name  string
		rules []model.Rule
		last  pkt
	}{
		{"cidr128/n=1000/last", cidr, tcp(cidr6Addr(999).String(), "fd00::2", 1, 1)},
		{"ipsets6/n=100/last", setRules, tcp(set6Addr(99).String(), "fd00::2", 1, 1)},
	} {
		pol := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p", k.rules...))}}
		spec, err := Compile(&pol, model.Ingress, sets, Options{})
		if err != nil {
			b.Fatal(err)
		}
		prog, err := spec.Load(h.maps)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(k.name, func(b *testing.B) { bench(b, prog.Head(), k.last, retAllow) })
		if err := prog.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
