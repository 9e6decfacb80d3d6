package polprog

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// benchSlowBudget bounds the kernel time of one slow cell (see bench).
const benchSlowBudget = 200 * time.Millisecond

// benchSizes are the rule counts BenchmarkPolicy measures for every kind.
var benchSizes = []int{10, 100, 1000, 10000}

// addBenchSets creates n sets "s<i>" (id 20+i, member setAddr(i)/32) once;
// dpd_ipset_idx is rebuilt a single time at the end. Ids are small, as
// dataplane/tcbpf allocates them (lowest free first).
func addBenchSets(h *harness, n int) resolver {
	res := resolver{}
	h.bulk = true
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		res[name] = uint32(20 + i)
		h.addMember(res[name], netip.PrefixFrom(setAddr(i), 32), 0, 0)
	}
	h.bulk = false
	h.rebuildIndex()
	return res
}

// ipSetRules is n rules "source in set s<i>", one set per rule; all deny
// but the last, which allows.
func ipSetRules(n int) []model.Rule {
	rules := make([]model.Rule, n)
	for i := range rules {
		rules[i] = model.Rule{Action: model.ActionDeny, SrcIPSets: []string{fmt.Sprintf("s%d", i)}}
	}
	rules[n-1].Action = model.ActionAllow
	return rules
}

func setAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}) }

// mergedResolver answers from a, then b.
type mergedResolver struct{ a, b Resolver }

func (m mergedResolver) SetID(n string) (uint32, bool) {
	if id, ok := m.a.SetID(n); ok {
		return id, ok
	}
	return m.b.SetID(n)
}

// BenchmarkPolicy measures one new flow through the compiled policy (head,
// continuation chunks, test epilogue) with BPF_PROG_TEST_RUN; ns/op is the
// kernel's per-run time and x_noop its ratio to "noop", a bare "return 0"
// program. Every kind runs at benchSizes rules, the packet matching the
// first or the last rule (rules deny, the last allows):
//
//	tcp-ports     rule i matches TCP to port 10000+i
//	cidr32        rule i: one /32 source
//	ipsets        rule i: source in set i (one set per rule, n sets)
//	ipset-shared  rule i: TCP to port 10000+i and source in one common set
func BenchmarkPolicy(b *testing.B) {
	h := newHarness(b)
	h.productionEpilogue(b)
	var noopNs float64
	bench := func(b *testing.B, prog *ebpf.Program, p pkt, want uint32) {
		h.t = b
		h.setState(p)
		// The kernel reports the mean over its repeats, so a slow cell (a
		// linear scan of 10,000 set lookups costs about a millisecond) runs
		// only enough of them for benchSlowBudget instead of a fixed count
		// (make bench passes -benchtime 1000000x).
		repeat := b.N
		if _, d, err := prog.Benchmark(frame, 100, nil); err == nil && d > time.Microsecond {
			repeat = max(100, min(b.N, int(benchSlowBudget/d)))
		}
		ret, d, err := prog.Benchmark(frame, repeat, b.ResetTimer)
		if err != nil {
			b.Fatal(err)
		}
		if ret != want {
			b.Fatalf("ret %d, want %d", ret, want)
		}
		ns := float64(d.Nanoseconds())
		b.ReportMetric(ns, "ns/op")
		if noopNs > 0 {
			b.ReportMetric(ns/noopNs, "x_noop")
		} else {
			noopNs = ns
		}
	}
	b.Run("noop", func(b *testing.B) {
		noop, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "Dual BSD/GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			b.Fatal(err)
		}
		defer noop.Close()
		noopNs = 0
		bench(b, noop, tcpPkt, 0)
	})
	if noopNs == 0 {
		b.Fatal("noop did not run")
	}
	fillTestSets(h)
	sets := mergedResolver{addBenchSets(h, benchSizes[len(benchSizes)-1]), testSets}
	type kind struct {
		name  string
		build func(n int) ([]model.Rule, pkt, pkt) // rules, first-match packet, last-match packet
	}
	kinds := []kind{
		{"tcp-ports", func(n int) ([]model.Rule, pkt, pkt) {
			return portRules(n, 10000), tcp("1.1.1.1", "2.2.2.2", 1, 10000), tcp("1.1.1.1", "2.2.2.2", 1, 10000+uint16(n-1))
		}},
		{"cidr32", func(n int) ([]model.Rule, pkt, pkt) {
			return cidrRules(n), tcp(cidrAddr(0).String(), "2.2.2.2", 1, 1), tcp(cidrAddr(n-1).String(), "2.2.2.2", 1, 1)
		}},
		{"ipsets", func(n int) ([]model.Rule, pkt, pkt) {
			return ipSetRules(n), tcp(setAddr(0).String(), "2.2.2.2", 1, 1), tcp(setAddr(n-1).String(), "2.2.2.2", 1, 1)
		}},
		// Every rule also needs the source in set "a" (10.0.0.0/24).
		{"ipset-shared", func(n int) ([]model.Rule, pkt, pkt) {
			rules := portRules(n, 10000)
			for i := range rules {
				rules[i].SrcIPSets = []string{"a"}
			}
			return rules, tcp("10.0.0.1", "2.2.2.2", 1, 10000), tcp("10.0.0.1", "2.2.2.2", 1, 10000+uint16(n-1))
		}},
	}
	for _, k := range kinds {
		for _, n := range benchSizes {
			h.t = b
			rules, first, last := k.build(n)
			pol := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p", rules...))}}
			spec, err := Compile(&pol, model.Ingress, sets, Options{})
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
