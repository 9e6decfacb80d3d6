package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/dpd-dev/dpd/internal/bench/tcpload"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

// P7 measures real traffic between two pods on real veths: request/response
// over one connection, a new connection per request, and bulk throughput,
// for the same pods with no dpd, with dpd allowing everything, with dpd
// enforcing a long rule list whose last rule allows, and with nftables
// enforcing that list. The cases alternate within each run, so a
// disturbance of the shared machine spreads over all of them rather than
// landing on one.

const (
	batchTraffic = 'p' // P7's dpd pods: index 0 the client, 1 the server
	batchPlain   = 'q' // P7's pods without dpd
	trafficPort  = 5201
	// closedPort is a port nothing listens on: a path with no policy
	// refuses a connection to it, a policy drops it.
	closedPort = 5202
	// trafficSources is how many addresses each client pod has, so that
	// no connection of the phase reuses a source address and port.
	trafficSources      = 16
	trafficPolicyPorts  = "p7-ports"
	trafficPolicyIPSets = "p7-ipsets"
)

// trafficCases in the order they run in each run, and are reported in.
var trafficCases = []struct {
	key, name string
	dpd       bool   // on the cali pods (else the plain ones)
	rules     string // "", "ports" or "ipsets"
}{
	{"plain", "no dpd (plain veths and routes)", false, ""},
	{"dpd-allow", "dpd, allow-all profile", true, ""},
	{"dpd-ports", "dpd, allowing rule last of the port rules", true, "ports"},
	{"dpd-ipsets", "dpd, allowing rule last of the IP-set rules", true, "ipsets"},
	{"nft-ports", "nftables, the same port rules", false, "ports"},
	{"nft-ipsets", "nftables, the same IP-set rules", false, "ipsets"},
}

// trafficAddr is 10.90+path.x.y: path 0 the dpd pods, 1 the plain ones;
// x 0 the server, 1 the client's addresses.
func trafficAddr(path, x, y int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(90 + path), byte(x), byte(y)})
}

func clientAddrs(path int) []netip.Addr {
	out := make([]netip.Addr, trafficSources)
	for i := range out {
		out[i] = trafficAddr(path, 1, i+1)
	}
	return out
}

// trafficRules are the rule lists both dataplanes enforce on the server's
// ingress. Ports: rule i drops TCP to port 10000+i, the last allows TCP
// to trafficPort. IP sets: rule i drops TCP to trafficPort from set i
// (four addresses that are not the client's), the last allows it from the
// last set, which holds the client's addresses.
type trafficRules struct {
	denyPorts []int
	sets      [][]netip.Addr
}

func newTrafficRules(ports, sets int, clients []netip.Addr) trafficRules {
	var r trafficRules
	for i := range ports - 1 {
		r.denyPorts = append(r.denyPorts, 10000+i)
	}
	for i := range sets - 1 {
		var m []netip.Addr
		for j := range 4 {
			m = append(m, netip.AddrFrom4([4]byte{10, 92, byte(i), byte(j + 1)}))
		}
		r.sets = append(r.sets, m)
	}
	r.sets = append(r.sets, clients)
	return r
}

func trafficSetID(i int) string { return fmt.Sprintf("s:p7-%03d", i) }

// dpdMessages are the IP sets and the two policies, as the controller
// sends them.
func (tr trafficRules) dpdMessages() []*felix.ToDataplane {
	var msgs []*felix.ToDataplane
	for i, m := range tr.sets {
		members := make([]string, len(m))
		for j, a := range m {
			members[j] = a.String()
		}
		msgs = append(msgs, &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{
			Id: trafficSetID(i), Type: felix.IPSetUpdate_IP, Members: members,
		}}})
	}
	var ports []*felix.Rule
	for _, p := range tr.denyPorts {
		ports = append(ports, &felix.Rule{Action: "deny", Protocol: tcp(), DstPorts: []*felix.PortRange{port(int32(p))}})
	}
	ports = append(ports, &felix.Rule{Action: "allow", Protocol: tcp(), DstPorts: []*felix.PortRange{port(trafficPort)}})
	var sets []*felix.Rule
	for i := range tr.sets {
		action := "deny"
		if i == len(tr.sets)-1 {
			action = "allow"
		}
		sets = append(sets, &felix.Rule{Action: action, Protocol: tcp(), SrcIpSetIds: []string{trafficSetID(i)},
			DstPorts: []*felix.PortRange{port(trafficPort)}})
	}
	return append(msgs, profile(), policyUpdate(trafficPolicyPorts, ports, nil), policyUpdate(trafficPolicyIPSets, sets, nil))
}

// trafficEndpoint describes P7's dpd pod i (0 client, 1 server) with the
// namespace profile and, for the server, policy on its ingress ("" none).
func trafficEndpoint(p *pod, i int, policy string) *felix.ToDataplane {
	nets := make([]string, len(p.addrs))
	for j, a := range p.addrs {
		nets[j] = a.String() + "/32"
	}
	ep := &felix.WorkloadEndpoint{
		State: "active", Name: p.host, Mac: p.mac.String(), ProfileIds: []string{profileName}, Ipv4Nets: nets,
	}
	if policy != "" {
		ep.Tiers = []*felix.TierInfo{{Name: tierName, IngressPolicies: []*felix.PolicyID{policyID(policy)}}}
	}
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
		Id: workloadID(batchTraffic, i), Endpoint: ep,
	}}}
}

// trafficNet is P7's four pods and their servers.
type trafficNet struct {
	pods    []*pod // dpd client, dpd server, plain client, plain server
	servers []*tcpload.Server
	src     [2]*tcpload.Sources // per path
	uplink  bool                // the driver made the node's default route
	program string              // the dpd server's ingress program now
	policy  string              // the policy it enforces now
}

func (t *trafficNet) client(dpd bool) *pod { return t.pods[map[bool]int{true: 0, false: 2}[dpd]] }
func (t *trafficNet) server(dpd bool) netip.AddrPort {
	path := map[bool]int{true: 0, false: 1}[dpd]
	return netip.AddrPortFrom(trafficAddr(path, 0, 2), trafficPort)
}
func (t *trafficNet) sources(dpd bool) *tcpload.Sources {
	return t.src[map[bool]int{true: 0, false: 1}[dpd]]
}

func (t *trafficNet) close() error {
	var errs []error
	for _, s := range t.servers {
		errs = append(errs, s.Close())
	}
	for _, p := range t.pods {
		errs = append(errs, p.close())
	}
	return errors.Join(errs...)
}

// traffic is P7.
func (r *runner) traffic(ctx context.Context) (err error) {
	s := r.o.Scale
	tr := &r.res.Traffic
	*tr = Traffic{Duration: s.TrafficDuration, Runs: s.TrafficRuns, PortRules: s.PortRules, SetRules: s.SetRules}
	r.progress("P7: real traffic, %d cases x 3 measurements of %s, %d runs", len(trafficCases), s.TrafficDuration, s.TrafficRuns)
	t, err := r.trafficSetup(ctx)
	if t != nil {
		defer func() {
			if cerr := r.trafficTeardown(ctx, t); cerr != nil {
				err = errors.Join(err, fmt.Errorf("tear down: %w", cerr))
			}
		}()
	}
	if err != nil {
		return err
	}
	// nftables polices the plain client's addresses.
	rules := newTrafficRules(s.PortRules, s.SetRules, clientAddrs(1))
	r.awaitIdle(ctx, r.d.pid, 30*time.Second)
	results := make([]TrafficCase, len(trafficCases))
	for i, c := range trafficCases {
		results[i] = TrafficCase{Key: c.key, Name: c.name}
	}
	// One short pass first, not recorded: the first connections of a
	// path resolve neighbours and warm caches.
	warm := min(s.TrafficDuration/4, 250*time.Millisecond)
	for i, c := range trafficCases {
		if _, err := r.trafficCase(ctx, t, rules, i, warm); err != nil {
			return fmt.Errorf("%s, warming up: %w", c.key, err)
		}
	}
	for run := range s.TrafficRuns {
		for i, c := range trafficCases {
			m, err := r.trafficCase(ctx, t, rules, i, s.TrafficDuration)
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", c.key, run+1, err)
			}
			results[i].RR = append(results[i].RR, m.rr)
			results[i].CRR = append(results[i].CRR, m.crr)
			results[i].Bulk = append(results[i].Bulk, m.bulk)
			if c.dpd {
				results[i].Verdicts = append(results[i].Verdicts, m.verdicts)
				if m.verdicts < 0.99 {
					r.warn("P7 %s run %d: dpd's policy decided %.3f packets per new connection: some connections skipped it", c.key, run+1, m.verdicts)
				}
			}
			r.progress("P7 run %d %-10s  %8.0f req/s  %7.0f conn/s  %6.2f Gbit/s  %.3f verdicts/conn", run+1, c.key, m.rr, m.crr, m.bulk/1e9, m.verdicts)
		}
	}
	tr.Cases = results
	return r.ctl.healthy()
}

type trafficMeasure struct {
	rr, crr, bulk float64
	verdicts      float64 // dpd's ingress policy verdicts per new connection
}

// trafficCase puts case i in place, checks that the path does what the
// case says, and measures it for d each way.
func (r *runner) trafficCase(ctx context.Context, t *trafficNet, rules trafficRules, i int, d time.Duration) (trafficMeasure, error) {
	c := trafficCases[i]
	if !c.dpd && c.rules != "" {
		if err := r.node.loadNFT(ctx, nftRuleset(c.rules, t.pods[3].host, rules)); err != nil {
			return trafficMeasure{}, err
		}
		defer func() { _ = r.node.deleteNFT(ctx) }()
	}
	if c.dpd {
		policy := map[string]string{"": "", "ports": trafficPolicyPorts, "ipsets": trafficPolicyIPSets}[c.rules]
		if err := r.trafficPolicy(ctx, t, policy); err != nil {
			return trafficMeasure{}, err
		}
	}
	cl, dst := t.client(c.dpd), t.server(c.dpd)
	// A policy drops what it does not allow; without one, a port nothing
	// listens on refuses.
	want := tcpload.Refused
	if c.rules != "" {
		want = tcpload.Dropped
	}
	var got tcpload.Outcome
	err := cl.do(func() error {
		var err error
		got, err = tcpload.Probe(netip.AddrPortFrom(dst.Addr(), closedPort), 300*time.Millisecond)
		return err
	})
	if err != nil {
		return trafficMeasure{}, err
	}
	if got != want {
		return trafficMeasure{}, fmt.Errorf("a connection to port %d was %s, want %s: the path is not the case's", closedPort, got, want)
	}
	var m trafficMeasure
	var rr, crr, bulk tcpload.Result
	if err := cl.do(func() (err error) { rr, err = tcpload.RequestResponse(dst, d); return err }); err != nil {
		return m, fmt.Errorf("request/response: %w", err)
	}
	var before uint64
	if c.dpd {
		if before, err = r.ingressVerdicts(ctx); err != nil {
			return m, err
		}
	}
	if err := cl.do(func() (err error) { crr, err = tcpload.ConnectionRate(dst, t.sources(c.dpd), d); return err }); err != nil {
		return m, fmt.Errorf("connection rate: %w", err)
	}
	if c.dpd {
		after, err := r.ingressVerdicts(ctx)
		if err != nil {
			return m, err
		}
		m.verdicts = float64(after-before) / float64(max(crr.Ops, 1))
	}
	if err := cl.do(func() (err error) { bulk, err = tcpload.Bulk(dst, d); return err }); err != nil {
		return m, fmt.Errorf("bulk: %w", err)
	}
	m.rr, m.crr, m.bulk = rr.Rate(), crr.Rate(), bulk.BitsPerSecond()
	return m, nil
}

// ingressVerdicts is the sum of the dpd server's ingress rule counters:
// how many packets its policy (or profile) decided. Packets of a flow
// conntrack already allowed are not counted, so during the connection-rate
// measurement it grows by one per connection, unless a connection skipped
// the policy.
func (r *runner) ingressVerdicts(ctx context.Context) (uint64, error) {
	resp, err := r.d.client.Inspect().GetCounters(ctx, &dpdv1.GetCountersRequest{Endpoint: endpointKey(workloadID(batchTraffic, 1))})
	if err != nil {
		return 0, fmt.Errorf("get counters: %w", err)
	}
	var n uint64
	for _, c := range resp.GetCounters() {
		if c.GetRule().GetDirection() == "ingress" {
			n += c.GetPackets()
		}
	}
	return n, nil
}

// trafficPolicy makes the dpd server enforce policy ("" the profile
// alone) and waits until Inspect shows it on a program of its own.
func (r *runner) trafficPolicy(ctx context.Context, t *trafficNet, policy string) error {
	if t.program != "" && t.policy == policy {
		return nil
	}
	if err := r.ctl.send(trafficEndpoint(t.pods[1], 1, policy)); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, r.o.Scale.PhaseTimeout)
	defer cancel()
	prog, err := r.awaitOneProgram(wctx, []string{endpointKey(workloadID(batchTraffic, 1))}, t.program)
	if err != nil {
		return fmt.Errorf("server onto policy %q: %w", policy, err)
	}
	t.program, t.policy = prog, policy
	return nil
}

// trafficSetup creates the pods, sends dpd the rules and its two
// endpoints, routes the plain pods and starts both servers.
func (r *runner) trafficSetup(ctx context.Context) (*trafficNet, error) {
	t := &trafficNet{}
	made, err := r.node.ensureUplink()
	t.uplink = made
	if err != nil {
		return t, err
	}
	base := nsPrefix + strconv.Itoa(os.Getpid()) + "-p7"
	type spec struct {
		suffix, host string
		batch        byte
		i            int
		addrs        []netip.Addr
	}
	for _, sp := range []spec{
		{"dc", ifaceName(batchTraffic, 0), batchTraffic, 0, clientAddrs(0)},
		{"ds", ifaceName(batchTraffic, 1), batchTraffic, 1, []netip.Addr{trafficAddr(0, 0, 2)}},
		{"pc", peerName(batchPlain, 0), batchPlain, 0, clientAddrs(1)},
		{"ps", peerName(batchPlain, 1), batchPlain, 1, []netip.Addr{trafficAddr(1, 0, 2)}},
	} {
		p, err := r.node.newPod(base+sp.suffix, sp.host, peerMAC(sp.batch, sp.i), sp.addrs)
		if err != nil {
			return t, err
		}
		t.pods = append(t.pods, p)
	}
	t.src = [2]*tcpload.Sources{tcpload.NewSources(clientAddrs(0)...), tcpload.NewSources(clientAddrs(1)...)}
	for _, p := range t.pods[2:] {
		if err := r.node.plainRoutes(p); err != nil {
			return t, err
		}
	}
	s := r.o.Scale
	rules := newTrafficRules(s.PortRules, s.SetRules, clientAddrs(0))
	if err := r.ctl.send(rules.dpdMessages()...); err != nil {
		return t, err
	}
	keys := []string{endpointKey(workloadID(batchTraffic, 0)), endpointKey(workloadID(batchTraffic, 1))}
	for _, k := range keys {
		r.ctl.tr.watchUp(k)
	}
	if err := r.ctl.send(trafficEndpoint(t.pods[0], 0, ""), trafficEndpoint(t.pods[1], 1, "")); err != nil {
		return t, err
	}
	wctx, cancel := context.WithTimeout(ctx, s.PhaseTimeout)
	defer cancel()
	if err := r.ctl.tr.awaitAllUp(wctx, keys); err != nil {
		return t, err
	}
	for _, p := range []*pod{t.pods[1], t.pods[3]} {
		err := p.do(func() error {
			srv, err := tcpload.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), trafficPort))
			if err == nil {
				t.servers = append(t.servers, srv)
			}
			return err
		})
		if err != nil {
			return t, fmt.Errorf("server in %s: %w", p.ns, err)
		}
	}
	return t, nil
}

// trafficTeardown removes dpd's two endpoints, then the pods.
func (r *runner) trafficTeardown(ctx context.Context, t *trafficNet) error {
	var errs []error
	if len(t.pods) > 1 && r.ctl != nil {
		keys := []string{endpointKey(workloadID(batchTraffic, 0)), endpointKey(workloadID(batchTraffic, 1))}
		for _, k := range keys {
			r.ctl.tr.forget(k)
		}
		err := r.ctl.send(endpointRemove(batchTraffic, 0), endpointRemove(batchTraffic, 1))
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, r.o.Scale.PhaseTimeout)
			err = r.ctl.tr.awaitRemoved(wctx, keys)
			cancel()
		}
		errs = append(errs, err)
	}
	errs = append(errs, t.close())
	if t.uplink {
		errs = append(errs, r.node.removeUplink())
	}
	return errors.Join(errs...)
}
