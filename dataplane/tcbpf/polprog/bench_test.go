package polprog

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// ipSetRules is n rules "source in set s<i>" (set i holds 10.2.x.y/32 of
// cidrAddr-like numbering); all deny but the last, which allows. Ids are
// small, as dataplane/tcbpf allocates them (lowest free first), so the sets
// have slots in dpd_ipset_idx.
func ipSetRules(h *harness, n int) ([]model.Rule, resolver) {
	res := resolver{}
	rules := make([]model.Rule, n)
	for i := range rules {
		name := fmt.Sprintf("s%d", i)
		res[name] = uint32(20 + i)
		h.addMember(res[name], netip.PrefixFrom(setAddr(i), 32), 0, 0)
		rules[i] = model.Rule{Action: model.ActionDeny, SrcIPSets: []string{name}}
	}
	rules[n-1].Action = model.ActionAllow
	return rules, res
}

func setAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}) }

// BenchmarkPolicy measures one new flow through the compiled policy (head,
// continuation chunks, test epilogue) with BPF_PROG_TEST_RUN; ns/op is the
// kernel's per-run time. "noop" is a bare "return 0" program for scale.
func BenchmarkPolicy(b *testing.B) {
	h := newHarness(b)
	bench := func(b *testing.B, prog *ebpf.Program, p pkt, want uint32) {
		h.t = b
		h.setState(p)
		ret, d, err := prog.Benchmark(frame, b.N, b.ResetTimer)
		if err != nil {
			b.Fatal(err)
		}
		if ret != want {
			b.Fatalf("ret %d, want %d", ret, want)
		}
		b.ReportMetric(float64(d.Nanoseconds()), "ns/op")
	}
	b.Run("noop", func(b *testing.B) {
		noop, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "Dual BSD/GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			b.Fatal(err)
		}
		defer noop.Close()
		bench(b, noop, tcpPkt, 0)
	})
	type kind struct {
		name  string
		sizes []int
		build func(n int) ([]model.Rule, Resolver, pkt, pkt) // rules, first-match packet, last-match packet
	}
	kinds := []kind{
		{"tcp-ports", []int{10, 100, 1000}, func(n int) ([]model.Rule, Resolver, pkt, pkt) {
			return portRules(n, 10000), testSets, tcp("1.1.1.1", "2.2.2.2", 1, 10000), tcp("1.1.1.1", "2.2.2.2", 1, 10000+uint16(n-1))
		}},
		{"cidr32", []int{10, 100, 1000}, func(n int) ([]model.Rule, Resolver, pkt, pkt) {
			return cidrRules(n), testSets, tcp(cidrAddr(0).String(), "2.2.2.2", 1, 1), tcp(cidrAddr(n-1).String(), "2.2.2.2", 1, 1)
		}},
		{"ipsets", []int{10, 100, 1000}, func(n int) ([]model.Rule, Resolver, pkt, pkt) {
			rules, res := ipSetRules(h, n)
			return rules, res, tcp(setAddr(0).String(), "2.2.2.2", 1, 1), tcp(setAddr(n-1).String(), "2.2.2.2", 1, 1)
		}},
		// Every rule also needs the source in set "a": one lookup per
		// packet, then answered from pol_scratch.
		{"ipset-shared", []int{10, 100, 1000}, func(n int) ([]model.Rule, Resolver, pkt, pkt) {
			rules := portRules(n, 10000)
			for i := range rules {
				rules[i].SrcIPSets = []string{"a"}
			}
			return rules, testSets, tcp("10.0.0.1", "2.2.2.2", 1, 10000), tcp("10.0.0.1", "2.2.2.2", 1, 10000+uint16(n-1))
		}},
	}
	fillTestSets(h)
	for _, k := range kinds {
		for _, n := range k.sizes {
			h.t = b
			rules, res, first, last := k.build(n)
			pol := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p", rules...))}}
			spec, err := Compile(&pol, model.Ingress, res, Options{})
			if err != nil {
				b.Fatal(err)
			}
			prog, err := spec.Load(h.maps)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/n=%d/first", k.name, n), func(b *testing.B) { bench(b, prog.Head(), first, retDeny) })
			b.Run(fmt.Sprintf("%s/n=%d/last", k.name, n), func(b *testing.B) { bench(b, prog.Head(), last, retAllow) })
			if err := prog.Close(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
