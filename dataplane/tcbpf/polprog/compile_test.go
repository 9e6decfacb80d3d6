package polprog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/model"
)

func TestRuleInfoTable(t *testing.T) {
	p := model.DirectionPolicy{
		Tiers: []model.Tier{
			tier("t1", deny, pol("t1/a", rule(allow, nil), rule(logA, nil)), pol("t1/b", rule(pass, nil))),
			tier("t2", pass, pol("t2/c", model.Rule{ID: "r-x", Action: model.ActionDeny})),
		},
		Profiles: []model.PolicyRules{prof("prof", rule(allow, nil), rule(pass, nil))},
	}
	spec, err := Compile(&p, model.Ingress, testSets, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []RuleInfo{
		{Tier: "t1", Policy: "t1/a", Kind: "policy", Index: 0, Action: allow},
		{Tier: "t1", Policy: "t1/a", Kind: "policy", Index: 1, Action: logA},
		{Tier: "t1", Policy: "t1/b", Kind: "policy", Index: 0, Action: pass},
		{Tier: "t1", Index: -1, Action: deny, Synthetic: SyntheticTierDefault},
		{Tier: "t2", Policy: "t2/c", Kind: "policy", Index: 0, RuleID: "r-x", Action: deny},
		{Tier: "t2", Index: -1, Action: pass, Synthetic: SyntheticTierDefault},
		{Policy: "prof", Kind: "profile", Index: 0, Action: allow},
		{Policy: "prof", Kind: "profile", Index: 1, Action: pass},
		{Index: -1, Action: deny, Synthetic: SyntheticNoMatch},
	}
	got := spec.Rules()
	if len(got) != len(want) {
		t.Fatalf("%d rules, want %d: %+v", len(got), len(want), got)
	}
	ids := map[uint64]bool{}
	for i := range want {
		id := got[i].CounterID
		if id == 0 || ids[id] {
			t.Errorf("rule %d: counter id %x is zero or repeated", i, id)
		}
		ids[id] = true
		got[i].CounterID = 0
		if got[i] != want[i] {
			t.Errorf("rule %d: %+v, want %+v", i, got[i], want[i])
		}
	}

	// Ids depend on the rule's place, not on the rest of the policy, and
	// differ between directions.
	other := model.DirectionPolicy{Tiers: []model.Tier{tier("t2", deny, pol("t2/c", model.Rule{ID: "r-x", Action: model.ActionAllow}))}}
	spec2, err := Compile(&other, model.Ingress, testSets, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if spec2.Rules()[0].CounterID != spec.Rules()[4].CounterID {
		t.Error("the same rule in another policy set got another counter id")
	}
	spec3, err := Compile(&other, model.Egress, testSets, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if spec3.Rules()[0].CounterID == spec2.Rules()[0].CounterID {
		t.Error("ingress and egress share a counter id")
	}
}

func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name string
		rule model.Rule
		want string
	}{
		{"unknown set", model.Rule{Action: model.ActionAllow, SrcIPSets: []string{"nope"}}, `"nope"`},
		{"unknown named port set", model.Rule{Action: model.ActionAllow, DstNamedPortSets: []string{"nope2"}}, `"nope2"`},
		{"unknown action", model.Rule{Action: 9}, "unknown action"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Compile(allowIf(c.rule), model.Ingress, testSets, Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one mentioning %s", err, c.want)
			}
		})
	}
}

func marshal(t *testing.T, insns asm.Instructions) []byte {
	t.Helper()
	var buf bytes.Buffer
	cp := make(asm.Instructions, len(insns))
	copy(cp, insns)
	if err := cp.Marshal(&buf, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 50 {
		p := randPolicy(rng)
		opts := Options{MaxChunkInsns: []int{0, 200}[i%2]}
		a, err := Compile(&p, model.Egress, randSetIDs, opts)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Compile(&p, model.Egress, randSetIDs, opts)
		if err != nil {
			t.Fatal(err)
		}
		if a.NumChunks() != b.NumChunks() {
			t.Fatalf("policy %d: %d vs %d chunks", i, a.NumChunks(), b.NumChunks())
		}
		for c := range a.NumChunks() {
			if !bytes.Equal(marshal(t, a.Chunk(c)), marshal(t, b.Chunk(c))) ||
				fmt.Sprint(a.Chunk(c)) != fmt.Sprint(b.Chunk(c)) {
				t.Fatalf("policy %d chunk %d differs between compiles", i, c)
			}
		}
	}
}

func slots(insns asm.Instructions) int { return int(insns.Size() / asm.InstructionSize) }

func TestChunking(t *testing.T) {
	big := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p", portRules(2000, 10000)...))}}
	cases := []struct {
		name      string
		opts      Options
		minChunks int
		maxChunks int
	}{
		{"default budget", Options{}, 2, DefaultMaxChunks},
		// Large enough that the chunks fit DefaultMaxChunks without growing.
		{"small budget", Options{MaxChunkInsns: 1500}, 10, DefaultMaxChunks},
		{"chunk cap grows chunks", Options{MaxChunkInsns: 500, MaxChunks: 4}, 2, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec, err := Compile(&big, model.Ingress, testSets, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			n := spec.NumChunks()
			if n < c.minChunks || n > c.maxChunks {
				t.Fatalf("%d chunks, want %d..%d", n, c.minChunks, c.maxChunks)
			}
			budget := c.opts.withDefaults().MaxChunkInsns
			for i := range n {
				if got := slots(spec.Chunk(i)); c.opts.MaxChunks == 0 && got > budget {
					t.Errorf("chunk %d has %d instructions, budget %d", i, got, budget)
				}
				if err := checkJumps(spec.Chunk(i)); err != nil {
					t.Errorf("chunk %d: %v", i, err)
				}
			}
		})
	}

	// One rule bigger than the budget gets a chunk of its own.
	huge := model.Rule{Action: model.ActionAllow, SrcNets: make([]netip.Prefix, 0)}
	for i := range 3000 {
		huge.SrcNets = append(huge.SrcNets, netip.PrefixFrom(cidrAddr(i), 32))
	}
	p := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p", rule(deny, proto("udp")), huge, rule(allow, nil)))}}
	spec, err := Compile(&p, model.Ingress, testSets, Options{MaxChunkInsns: 1000})
	if err != nil {
		t.Fatalf("oversized rule: %v", err)
	}
	if spec.NumChunks() != 3 {
		t.Errorf("oversized rule: %d chunks, want 3 (before, rule, after)", spec.NumChunks())
	}
}
