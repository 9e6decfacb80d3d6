package polprog

import (
	"fmt"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// TestJumpAhead: the indexed walk jumps to the first word that can hold a
// candidate, but never past a denying tier default, and a Pass rule's
// target still sees the classification.
func TestJumpAhead(t *testing.T) {
	h := newHarness(t)
	t1 := portRules(300, 10000)
	t1[299].Action = model.ActionDeny
	// A Pass deep in t1 for the ports t2 decides.
	t1 = append(t1[:250], append([]model.Rule{{Action: model.ActionPass, Protocol: proto("tcp"), DstPorts: ports(30000, 30299)}}, t1[250:]...)...)
	// t2 also allows a port t1 neither decides nor passes: t1's default
	// must still deny it.
	t2 := append(portRules(300, 30000), model.Rule{Action: model.ActionAllow, Protocol: proto("tcp"), DstPorts: ports(50000, 50000)})
	p := model.DirectionPolicy{Tiers: []model.Tier{tier("t1", deny, pol("p1", t1...)), tier("t2", deny, pol("p2", t2...))}}
	pkts := []pkt{
		tcp("1.1.1.1", "2.2.2.2", 1, 10290), // t1 rule 291 (after the Pass)
		tcp("1.1.1.1", "2.2.2.2", 1, 10100), // t1 rule 100
		tcp("1.1.1.1", "2.2.2.2", 1, 40000), // nothing: t1's default, not t2's
		tcp("1.1.1.1", "2.2.2.2", 1, 30299), // passed to t2, its last rule allows
		tcp("1.1.1.1", "2.2.2.2", 1, 30150), // passed to t2, rule 150 denies
		udp("1.1.1.1", "2.2.2.2", 1, 30299), // no port rule matches UDP
		tcp("1.1.1.1", "2.2.2.2", 1, 50000), // only t2 has a candidate, behind t1's default
	}
	want := []string{"p1#291", "p1#100", "default:t1", "+p2#299", "p2#150", "default:t1", "default:t1"}
	for _, opts := range []Options{{}, {MaxChunkInsns: 400}, {Strategy: StrategyIndexed, LinearHead: -1}, {LinearHead: 40, MaxChunkInsns: 600}} {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			h.t = t
			spec, err := Compile(&p, model.Ingress, testSets, opts)
			if err != nil {
				t.Fatal(err)
			}
			if spec.index == nil || spec.index.words < 2 {
				t.Fatalf("not indexed over several words: %+v", spec.index)
			}
			checkFlows(t, h, h.load(&p, testSets, opts), pkts, want)
		})
	}
}
