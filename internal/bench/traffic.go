package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/dpd-dev/dpd/internal/bench/tcpload"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

// P7 measures real traffic between two pods on real veths: request/response
// over one connection, a new connection per request, and bulk throughput.
// Three pairs of pods, each pair behind a node namespace of its own, so
// that all three paths exist at once and none costs another anything: the
// daemon's node, where dpd programs the pods' "cali" host sides; a plain
// node (kernel routes only); and an nftables node (kernel routes and the
// nftables ruleset; netfilter's connection tracking, once a ruleset needs
// it, runs for every packet of its namespace). The measurements are short
// slices that alternate between the paths, so a disturbance of the shared
// machine lands on all of them, and each case is compared with the plain
// path's slice of the same round.

const (
	batchTraffic = 'p' // P7's dpd pods: index 0 the client, 1 the server
	batchPlain   = 'q' // the plain node's pods
	batchNFT     = 'r' // the nftables node's pods
	batchFloor   = 's' // the floor node's pods (trafficfloor.go)
	trafficPort  = 5201
	// closedPort is a port nothing listens on: a path with no policy
	// refuses a connection to it, a policy drops it.
	closedPort = 5202
	// trafficSources is how many addresses each client pod has, so that
	// no connection of the phase reuses a source address and port.
	trafficSources      = 16
	trafficPolicyPorts  = "p7-ports"
	trafficPolicyIPSets = "p7-ipsets"
	// trafficProcs is GOMAXPROCS during P7 at least: more than the threads
	// that can block in the generator's system calls at once (a client and
	// a server per path, every path at once while the phase warms up).
	trafficProcs = 16
)

// The three paths, by index.
const (
	pathDPD = iota
	pathPlain
	pathNFT
	pathFloor
)

// trafficPathNames name the paths in errors.
var trafficPathNames = [...]string{pathDPD: "dpd's node", pathPlain: "the plain node", pathNFT: "the nftables node", pathFloor: "the floor node"}

// trafficCases in report order.
var trafficCases = []struct {
	key, name string
	path      int
	rules     string // "", "ports" or "ipsets"
}{
	{"plain", "no dpd (plain veths and routes)", pathPlain, ""},
	{"dpd-allow", "dpd, allow-all profile", pathDPD, ""},
	{"dpd-ports", "dpd, allowing rule last of the port rules", pathDPD, "ports"},
	{"dpd-ipsets", "dpd, allowing rule last of the IP-set rules", pathDPD, "ipsets"},
	{"nft-ports", "nftables, the same port rules", pathNFT, "ports"},
	{"nft-ipsets", "nftables, the same IP-set rules", pathNFT, "ipsets"},
	{"tc-floor", "no dpd, a pass-all TC program on each of dpd's four hooks", pathFloor, ""},
}

// trafficConfigs are the rule lists in turn and the cases measured under
// each; the plain path is in every one, as the base of its ratios.
var trafficConfigs = []struct {
	rules string
	cases []string
}{
	{"", []string{"plain", "dpd-allow", "tc-floor"}},
	{"ports", []string{"plain", "dpd-ports", "nft-ports", "tc-floor"}},
	{"ipsets", []string{"plain", "dpd-ipsets", "nft-ipsets", "tc-floor"}},
}

func trafficCaseIndex(key string) int {
	for i, c := range trafficCases {
		if c.key == key {
			return i
		}
	}
	panic("no traffic case " + key)
}

// trafficAddr is 10.90+path.x.y; x 0 the server, 1 the client's addresses.
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
			m = append(m, netip.AddrFrom4([4]byte{10, 99, byte(i), byte(j + 1)}))
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

// trafficPath is one node namespace with its client and server pod.
type trafficPath struct {
	node           *node
	owned          bool // the driver made node for P7 (else it is dpd's)
	uplink         bool // the driver gave node its default route
	client, server *pod
	srv            *tcpload.Server
	src            *tcpload.Sources
	dst            netip.AddrPort
	pass           *ebpf.Program // the floor path's program
	passLinks      []link.Link   // and its TCX links (none in tc mode)
}

func (p *trafficPath) close() error {
	var errs []error
	if p.srv != nil {
		errs = append(errs, p.srv.Close())
	}
	for _, l := range p.passLinks {
		errs = append(errs, l.Close())
	}
	if p.pass != nil {
		errs = append(errs, p.pass.Close())
	}
	for _, pd := range []*pod{p.client, p.server} {
		if pd != nil {
			errs = append(errs, pd.close())
		}
	}
	if p.uplink && !p.owned {
		errs = append(errs, p.node.removeUplink())
	}
	if p.owned {
		errs = append(errs, p.node.close())
	}
	return errors.Join(errs...)
}

// trafficNet is P7's paths.
type trafficNet struct {
	paths   [4]*trafficPath
	program string    // the dpd server's ingress program now
	sent    bool      // dpd's two endpoints were sent (teardown waits for their removal)
	policy  string    // the policy it enforces now
	stats   *bpfStats // with Options.TrafficBPFStats
}

// traffic is P7.
func (r *runner) traffic(ctx context.Context) (err error) {
	s := r.o.Scale
	tr := &r.res.Traffic
	*tr = Traffic{Slice: s.TrafficSlice, Rounds: s.TrafficRounds, PortRules: s.PortRules, SetRules: s.SetRules}
	r.progress("P7: real traffic, %d rounds of %s slices per case and measurement", s.TrafficRounds, s.TrafficSlice)
	t := &trafficNet{}
	defer func() {
		if cerr := r.trafficTeardown(ctx, t); cerr != nil {
			err = errors.Join(err, fmt.Errorf("tear down: %w", cerr))
		}
	}()
	if err := r.trafficSetup(ctx, t); err != nil {
		return err
	}
	cpu, err := trafficCPU()
	if err != nil {
		return err
	}
	if cpu >= 0 {
		restore, perr := pinThreads(cpu)
		if perr != nil {
			return perr
		}
		defer func() { err = errors.Join(err, restore()) }()
		tr.Pinned, tr.CPU = true, cpu
		r.progress("P7: the load generator runs on CPU %d", cpu)
	}
	// Every thread of the load generator blocks in system calls, each
	// holding a P while it does. With no P idle, sysmon takes one back from
	// a blocked thread every 20 µs, waking on the generator's CPU each time,
	// and the thread that returns first must find one again: enough Ps that
	// one is always idle keep the Go scheduler out of what is measured.
	prevProcs := runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), trafficProcs))
	defer runtime.GOMAXPROCS(prevProcs)
	nftRules := newTrafficRules(s.PortRules, s.SetRules, clientAddrs(pathNFT))
	if r.o.TrafficBPFStats {
		var err error
		if t.stats, err = openBPFStats(r.d.pid); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, t.stats.close()) }()
	}
	bpfPerConn := map[string][]float64{}
	runsPerConn := map[string][]float64{}
	r.awaitIdle(ctx, r.d.pid, 30*time.Second)
	if err := r.trafficSteady(ctx, t, s.TrafficSteady, nftRules); err != nil {
		return err
	}
	cases := make([]TrafficCase, len(trafficCases))
	for i, c := range trafficCases {
		cases[i] = TrafficCase{Key: c.key, Name: c.name}
	}
	before, cpuErr := sampleCPU(r.d.pid)
	for _, cfg := range trafficConfigs {
		if err := r.trafficConfig(ctx, t, cfg.rules, nftRules); err != nil {
			return fmt.Errorf("rules %q: %w", cfg.rules, err)
		}
		for _, key := range cfg.cases {
			if err := r.trafficProbe(t, key); err != nil {
				return err
			}
		}
		// One short pass first, not recorded: the first connections of
		// a path resolve neighbours and warm caches.
		warm := min(s.TrafficSlice/4, 100*time.Millisecond)
		if _, err := r.trafficRound(ctx, t, cfg.cases, warm, 0); err != nil {
			return fmt.Errorf("warming up: %w", err)
		}
		for round := range s.TrafficRounds {
			ms, err := r.trafficRound(ctx, t, cfg.cases, s.TrafficSlice, round)
			if err != nil {
				return fmt.Errorf("round %d: %w", round+1, err)
			}
			base := ms[0] // cfg.cases[0] is the plain path
			floor := ms[slices.Index(cfg.cases, "tc-floor")]
			for j, key := range cfg.cases {
				c := &cases[trafficCaseIndex(key)]
				m := ms[j]
				c.RR, c.CRR, c.Bulk = append(c.RR, m.rr), append(c.CRR, m.crr), append(c.Bulk, m.bulk)
				if j > 0 {
					c.BaseRR, c.BaseCRR, c.BaseBulk = append(c.BaseRR, base.rr), append(c.BaseCRR, base.crr), append(c.BaseBulk, base.bulk)
				}
				if t.stats != nil && m.crr > 0 && trafficCases[trafficCaseIndex(key)].path == pathDPD {
					bpfPerConn[key] = append(bpfPerConn[key], m.bpfPerConn.Seconds()*1e6)
					runsPerConn[key] = append(runsPerConn[key], m.runsPerConn)
				}
				if trafficCases[trafficCaseIndex(key)].path == pathDPD {
					c.FloorRR, c.FloorCRR, c.FloorBulk = append(c.FloorRR, floor.rr), append(c.FloorCRR, floor.crr), append(c.FloorBulk, floor.bulk)
				}
				// Verdicts are counted over the connection-rate measurements.
				if trafficCases[trafficCaseIndex(key)].path == pathDPD && r.o.measures("crr") {
					c.Verdicts = append(c.Verdicts, m.verdicts)
					if m.verdicts < 0.99 {
						r.warn("P7 %s round %d: dpd's policy decided %.3f packets per new connection: some connections skipped it", key, round+1, m.verdicts)
					}
				}
			}
		}
		for _, key := range cfg.cases {
			c := cases[trafficCaseIndex(key)]
			r.progress("P7 %-10s  %8.0f req/s  %7.0f conn/s  %6.2f Gbit/s (medians)", key, medianOf(c.RR), medianOf(c.CRR), medianOf(c.Bulk)/1e9)
			if v := bpfPerConn[key]; len(v) > 0 {
				r.progress("P7 %-10s  entry programs' run time %.2f µs per new connection [%.2f–%.2f], %.1f runs (medians)",
					key, medianOf(v), slices.Min(v), slices.Max(v), medianOf(runsPerConn[key]))
			}
		}
	}
	if after, err := sampleCPU(r.d.pid); err == nil && cpuErr == nil && r.d.pid != 0 {
		dpd, _, _ := loadBetween(before, after)
		tr.DPDCores = dpd * float64(runtime.NumCPU())
	}
	tr.Cases = cases
	return r.ctl.healthy()
}

// trafficConfig puts rules ("" none) in place on the dpd server (the
// allow-all profile alone for none) and on the nftables node.
func (r *runner) trafficConfig(ctx context.Context, t *trafficNet, rules string, nft trafficRules) error {
	nn := t.paths[pathNFT].node
	if rules == "" {
		_ = nn.deleteNFT(ctx) // none yet
	} else if err := nn.loadNFT(ctx, nftRuleset(rules, t.paths[pathNFT].server.host, nft)); err != nil {
		return err
	}
	policy := map[string]string{"": "", "ports": trafficPolicyPorts, "ipsets": trafficPolicyIPSets}[rules]
	return r.trafficPolicy(ctx, t, policy)
}

// trafficProbe checks that case key's path does what the case says: a
// policy drops what it does not allow; without one, a port nothing
// listens on refuses.
func (r *runner) trafficProbe(t *trafficNet, key string) error {
	c := trafficCases[trafficCaseIndex(key)]
	p := t.paths[c.path]
	want := tcpload.Refused
	if c.rules != "" {
		want = tcpload.Dropped
	}
	var got tcpload.Outcome
	err := p.client.do(func() (err error) {
		got, err = tcpload.Probe(netip.AddrPortFrom(p.dst.Addr(), closedPort), 300*time.Millisecond)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if got != want {
		return fmt.Errorf("%s: a connection to port %d was %s, want %s: the path is not the case's", key, closedPort, got, want)
	}
	return nil
}

// ingressVerdicts is the sum of the dpd server's ingress rule counters:
// how many packets its policy (or profile) decided. Packets of a flow
// conntrack already allowed are not counted, so during a connection-rate
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
	if err := r.ctl.send(trafficEndpoint(t.paths[pathDPD].server, 1, policy)); err != nil {
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

// trafficSetup creates the paths: the pods in dpd's node namespace, which
// dpd learns of as endpoints with the allow-all profile (the rules sent
// too), and the plain and nftables nodes with their pods, routed by
// kernel routes; then a server in each server pod.
func (r *runner) trafficSetup(ctx context.Context, t *trafficNet) error {
	base := nsPrefix + strconv.Itoa(os.Getpid()) + "-p7"
	// The floor attaches its programs the way dpd does.
	if err := r.readAttach(ctx); err != nil {
		return err
	}
	tcx := r.res.Attach.Mode == "tcx"
	for path, batch := range map[int]byte{pathDPD: batchTraffic, pathPlain: batchPlain, pathNFT: batchNFT, pathFloor: batchFloor} {
		p := &trafficPath{node: r.node}
		t.paths[path] = p
		if path != pathDPD {
			n, err := newNamedNode(base + string(batch))
			if err != nil {
				return err
			}
			p.node, p.owned = n, true
		}
		var err error
		if p.uplink, err = p.node.ensureUplink(); err != nil {
			return err
		}
		host := func(i int) string { return peerName(batch, i) } // names dpd does not watch
		if path == pathDPD {
			host = func(i int) string { return ifaceName(batch, i) }
		}
		if p.client, err = p.node.newPod(base+string(batch)+"c", host(0), peerMAC(batch, 0), clientAddrs(path)); err != nil {
			return err
		}
		if p.server, err = p.node.newPod(base+string(batch)+"s", host(1), peerMAC(batch, 1), []netip.Addr{trafficAddr(path, 0, 2)}); err != nil {
			return err
		}
		p.src = tcpload.NewSources(clientAddrs(path)...)
		p.dst = netip.AddrPortFrom(trafficAddr(path, 0, 2), trafficPort)
		if path != pathDPD {
			for _, pd := range []*pod{p.client, p.server} {
				if err := p.node.plainRoutes(pd); err != nil {
					return err
				}
			}
		}
		if path == pathFloor {
			if p.pass, err = passProgram(); err != nil {
				return err
			}
			for _, pd := range []*pod{p.client, p.server} {
				links, err := p.node.attachPass(pd.host, p.pass, tcx)
				p.passLinks = append(p.passLinks, links...)
				if err != nil {
					return err
				}
			}
		}
	}
	s := r.o.Scale
	dp := t.paths[pathDPD]
	if err := r.ctl.send(newTrafficRules(s.PortRules, s.SetRules, clientAddrs(pathDPD)).dpdMessages()...); err != nil {
		return err
	}
	keys := []string{endpointKey(workloadID(batchTraffic, 0)), endpointKey(workloadID(batchTraffic, 1))}
	for _, k := range keys {
		r.ctl.tr.watchUp(k)
	}
	if err := r.ctl.send(trafficEndpoint(dp.client, 0, ""), trafficEndpoint(dp.server, 1, "")); err != nil {
		return err
	}
	t.sent = true
	wctx, cancel := context.WithTimeout(ctx, s.PhaseTimeout)
	defer cancel()
	if err := r.ctl.tr.awaitAllUp(wctx, keys); err != nil {
		return err
	}
	for _, p := range t.paths {
		err := p.server.do(func() (err error) {
			p.srv, err = tcpload.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), trafficPort))
			return err
		})
		if err != nil {
			return fmt.Errorf("server in %s: %w", p.server.ns, err)
		}
	}
	return nil
}

// trafficTeardown removes dpd's two endpoints, then every path.
func (r *runner) trafficTeardown(ctx context.Context, t *trafficNet) error {
	var errs []error
	if t.sent && r.ctl != nil {
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
	for _, p := range t.paths {
		if p != nil {
			errs = append(errs, p.close())
		}
	}
	return errors.Join(errs...)
}
