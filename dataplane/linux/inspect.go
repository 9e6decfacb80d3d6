package linux

// engine.KernelInspector: Inspect's questions answered under the kernel's
// lock, so the datapath (which Configure may close and reopen) is never
// used by anyone who does not hold it, and nothing kernel-typed leaves.

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

var _ engine.KernelInspector = (*Kernel)(nil)

var errClosed = errors.New("linux dataplane closed")

// ConntrackCountInterval is the least time between two walks of conntrack
// for its entry count: the map is written by the programs, so userspace
// cannot know its size without reading it, and a scrape must stay cheap.
const ConntrackCountInterval = 10 * time.Second

// ctCount is the cached count of the maps the programs write: conntrack
// and, walked alongside it, the fragments. Guarded by Kernel.mu.
type ctCount struct {
	at      time.Time
	entries int
	frags   int
}

// EndpointDetails implements engine.KernelInspector.
func (k *Kernel) EndpointDetails(iface string) (model.EndpointDetails, bool) {
	d, ok := k.Endpoint(iface)
	if !ok {
		return model.EndpointDetails{}, false
	}
	return model.EndpointDetails{
		Ifindex: d.Ifindex, AttachMode: d.AttachMode, Ready: d.Ready, LastProgrammed: d.LastProgrammed,
		IngressProgram: d.IngressProgram, EgressProgram: d.EgressProgram,
	}, true
}

// Rules implements engine.KernelInspector: the counter table of the
// program installed for an interface's direction.
func (k *Kernel) Rules(iface string, dir model.Direction) ([]model.RuleInfo, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	prog := k.installedLocked(iface, dir)
	if prog == nil {
		return nil, false
	}
	return slices.Clone(prog.Rules()), true // the program's table stays its own
}

func (k *Kernel) installedLocked(iface string, dir model.Direction) loadedProgram {
	st, ok := k.eps.eps[iface]
	if !ok || st.inst[dir] == nil {
		return nil
	}
	return st.inst[dir].prog
}

// Trace implements engine.KernelInspector: the interface's attached entry
// program runs on frame with the trace mark, and the deciding rule is
// looked up in the table of the program installed at that moment.
func (k *Kernel) Trace(iface string, dir model.Direction, frame []byte) (model.TraceResult, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return model.TraceResult{}, errClosed
	}
	st, ok := k.eps.eps[iface]
	if !ok || st.ifindex == 0 {
		return model.TraceResult{}, engine.ErrNotProgrammed
	}
	// model.Egress is abi.DirFromWEP (0), model.Ingress abi.DirToWEP (1).
	// A host interface runs the host entry programs, whose stages
	// (forward, untracked, pre-DNAT) have programs of their own.
	trace, progs := k.bpf.Trace, []*sharedProg{st.inst[dir]}
	if st.host {
		trace = k.bpf.TraceHost
		for i := range numStages {
			progs = append(progs, st.stages[i].inst[dir])
		}
	}
	res, err := trace(st.ifindex, int(dir), frame)
	if err != nil {
		return model.TraceResult{}, err
	}
	out := traceResult(res)
	out.Ifindex, out.Host = st.ifindex, st.host
	if out.RuleID != 0 {
		out.Rule, out.RuleFound = ruleOf(progs, out.RuleID)
	}
	return out, nil
}

// ruleOf finds the rule of counter id in the tables of progs (nil ones
// skipped).
func ruleOf(progs []*sharedProg, id uint64) (model.RuleInfo, bool) {
	for _, sp := range progs {
		if sp == nil || sp.prog == nil {
			continue
		}
		for _, r := range sp.prog.Rules() {
			if r.CounterID == id {
				return r, true
			}
		}
	}
	return model.RuleInfo{}, false
}

// traceResult reads the final dpd_state of a trace run.
func traceResult(res tcbpf.TraceResult) model.TraceResult {
	st := res.State
	out := model.TraceResult{Return: res.Ret}
	switch {
	case !res.Reached && st.Flags&abi.StNoBackend != 0:
		out.Stage = model.TraceNoBackend
		return out
	case !res.Reached:
		out.Stage = model.TraceNotReady
		return out
	case st.Flags&abi.StNoPolicy != 0:
		out.Stage = model.TraceNoPolicy
	case st.Flags&abi.StEpilogue == 0:
		out.Stage = model.TraceIncomplete
	default:
		out.Stage = model.TraceDecided
		out.Allowed = st.Verdict == abi.VerdictAllow
		out.RuleID = st.RuleId
	}
	switch {
	case st.Flags&abi.StCTFwd != 0:
		out.Conntrack = "established"
	case st.Flags&abi.StCTRev != 0:
		out.Conntrack = "reply"
	case st.Flags&abi.StCTRelated != 0:
		out.Conntrack = "related"
	}
	switch {
	case st.Flags&abi.StICMP6ND != 0:
		out.Exempt = "neighbour discovery"
	case st.Flags&abi.StFailsafe != 0:
		out.Exempt = "failsafe port"
	}
	return out
}

// ReadCounter implements engine.KernelInspector.
func (k *Kernel) ReadCounter(id uint64) (model.RuleCounter, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return model.RuleCounter{}, errClosed
	}
	p, b, err := k.bpf.ReadCounter(id)
	return model.RuleCounter{Packets: p, Bytes: b}, err
}

// ConntrackEntries implements engine.KernelInspector: a count at most
// ConntrackCountInterval old.
func (k *Kernel) ConntrackEntries() (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.conntrackEntriesLocked(time.Now())
}

func (k *Kernel) conntrackEntriesLocked(now time.Time) (int, error) {
	if k.closed {
		return 0, errClosed
	}
	if !k.ctCount.at.IsZero() && now.Sub(k.ctCount.at) < ConntrackCountInterval {
		return k.ctCount.entries, nil
	}
	n, err := k.bpf.CountConntrack()
	if err != nil {
		return 0, err
	}
	frags, err := k.bpf.FragmentEntries()
	if err != nil {
		return 0, err
	}
	k.ctCount.at, k.ctCount.entries, k.ctCount.frags = now, n, frags
	return n, nil
}

// MapUsage implements engine.KernelInspector. Every count but conntrack's
// and the fragments' comes from what this process wrote and tracks (no map
// is read); entries an earlier dpd left that garbage collection has not
// removed yet are not counted. Conntrack and dpd_frags, written by the
// programs, are walked in batches at most once per ConntrackCountInterval.
func (k *Kernel) MapUsage() ([]model.MapUsage, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, errClosed
	}
	m := k.bpf.Maps()
	capOf := func(mp interface{ MaxEntries() uint32 }) int { return int(mp.MaxEntries()) }
	var out []model.MapUsage
	var errs []error
	if ct, err := k.conntrackEntriesLocked(time.Now()); err != nil {
		errs = append(errs, fmt.Errorf("count %s: %w", abi.MapConntrack, err))
	} else {
		out = append(out,
			model.MapUsage{Name: abi.MapConntrack, Entries: ct, Capacity: capOf(m.Conntrack), Conntrack: true},
			model.MapUsage{Name: "dpd_frags", Entries: k.ctCount.frags, Capacity: capOf(m.Frags)})
	}
	ifstate, jump := 0, 1+k.eps.hostJumpEntries() // the epilogue sits at abi.JumpEpilogue
	for _, st := range k.eps.eps {
		if st.ifindex != 0 && (st.ready || st.closed) {
			ifstate++
		}
		if st.hasSlot {
			for _, sp := range st.inst {
				if sp != nil {
					jump++
				}
			}
		}
	}
	chain := 0
	for _, sp := range k.pols.progs {
		if c, ok := sp.prog.(interface{ ChainIndices() []uint32 }); ok {
			chain += len(c.ChainIndices())
		}
	}
	routes := 0
	for dst := range k.routes.routes {
		if dst.Addr().Is4() { // the only family ApplyRoute writes to dpd_routes
			routes++
		}
	}
	fe, be := 0, 0
	for _, ports := range k.svcs.services {
		for _, p := range ports {
			fe += len(p.fes)
			be += len(p.bes)
		}
	}
	for _, e := range k.svcs.adopted {
		if !k.svcs.claimed[e.ID] {
			fe++
			be += e.Count
		}
	}
	out = append(out,
		model.MapUsage{Name: "dpd_ipsets", Entries: k.bpf.IPSetEntries(), Capacity: capOf(m.IPSets)},
		model.MapUsage{Name: "dpd_ifstate", Entries: ifstate, Capacity: capOf(m.IfState)},
		model.MapUsage{Name: "dpd_jump", Entries: jump, Capacity: capOf(m.Jump)},
		model.MapUsage{Name: "dpd_chain", Entries: chain, Capacity: capOf(m.Chain)},
		model.MapUsage{Name: "dpd_nat_fe", Entries: fe, Capacity: capOf(m.NATFrontends)},
		model.MapUsage{Name: "dpd_nat_be", Entries: be, Capacity: capOf(m.NATBackends)},
		model.MapUsage{Name: "dpd_routes", Entries: routes, Capacity: capOf(m.Routes)},
	)
	if n, err := k.bpf.RuleCounterEntries(); err != nil {
		errs = append(errs, fmt.Errorf("count dpd_rule_ctrs: %w", err))
	} else {
		out = append(out, model.MapUsage{Name: "dpd_rule_ctrs", Entries: n, Capacity: capOf(m.RuleCtrs)})
	}
	return out, errors.Join(errs...)
}

// Drops implements engine.DropInspector: one per-CPU array read per reason.
func (k *Kernel) Drops() ([]model.DropCount, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, errClosed
	}
	var out []model.DropCount
	var errs []error
	for _, r := range tcbpf.DropReasons() {
		p, b, err := k.bpf.ReadDrops(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, model.DropCount{Reason: r.String(), Packets: p, Bytes: b})
	}
	return out, errors.Join(errs...)
}
