package polprog

import (
	"net/netip"
	"regexp"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// heavyRule is a worst case for the verifier: many branches, memoised and
// plain set lookups, nets of both families, named ports.
func heavyRule(i int) model.Rule {
	p := uint16(10000 + i)
	return model.Rule{
		Action:              []model.Action{model.ActionDeny, model.ActionLog, model.ActionAllow}[i%3],
		SrcIPSets:           []string{"a", "b"},
		NotDstIPSets:        []string{"np"},
		DstPorts:            ports(p, p, 20000, 20100),
		DstNamedPortSets:    []string{"svc"},
		NotSrcNets:          nets("192.168.0.0/16", "fd00::/64"),
		NotICMP:             &model.ICMPMatch{Type: 8},
		NotSrcNamedPortSets: []string{"srcnp"},
	}
}

var processedRE = regexp.MustCompile(`processed (\d+) insns`)

// TestVerifierHeadroom loads worst-case chunks at the default budget and
// checks the verifier explored far less than its 1M-instruction limit.
func TestVerifierHeadroom(t *testing.T) {
	h := newHarness(t)
	fillTestSets(h)
	loadOptions = ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}
	t.Cleanup(func() { loadOptions = ebpf.ProgramOptions{} })
	cases := map[string][]model.Rule{
		"heavy":  nil,
		"ports":  portRules(4000, 10000),
		"cidr32": cidrRules(4000),
	}
	for i := range 600 {
		cases["heavy"] = append(cases["heavy"], heavyRule(i))
	}
	for name, rules := range cases {
		t.Run(name, func(t *testing.T) {
			h.t = t
			p := model.DirectionPolicy{
				Tiers: []model.Tier{
					tier("t1", pass, pol("p1", rules[:len(rules)/2]...)),
					tier("t2", deny, pol("p2", rules[len(rules)/2:]...)),
				},
				Profiles: []model.PolicyRules{prof("prof", model.Rule{Action: model.ActionAllow, SrcNets: []netip.Prefix{}})},
			}
			prog := h.load(&p, testSets, Options{})
			for c, chunk := range prog.progs {
				m := processedRE.FindStringSubmatch(chunk.VerifierLog)
				if m == nil {
					t.Fatalf("chunk %d: no verifier stats in log", c)
				}
				n, _ := strconv.Atoi(m[1])
				info, err := chunk.Info()
				if err != nil {
					t.Fatal(err)
				}
				insns, _ := info.Instructions()
				t.Logf("chunk %d: %d instructions, verifier processed %d", c, len(insns), n)
				if n > 400_000 {
					t.Errorf("chunk %d: verifier processed %d instructions, too close to the 1M limit", c, n)
				}
			}
		})
	}
}
