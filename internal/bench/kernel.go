package bench

import (
	"context"
	"fmt"
	"time"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// Attach is the attach mode the daemon chose and the kernel costs it
// measured (at start, on a scratch device) and observed (its real
// operations since), as GetStatus reports them: the floor every latency
// figure stands on.
type Attach struct {
	Mode   string // "tcx" or "tc"
	Reason string
	Costs  []KernelCost
}

// KernelCost is one kernel operation's cost.
type KernelCost struct {
	Op       string        // tcx_first_attach, tc_attach, program_load, ...
	Probe    time.Duration // the start-up probe's (0: not probed)
	Observed time.Duration // mean over dpd's real operations
	Count    uint64        // how many those were
}

// kernelOps names the operations in report order; others GetStatus
// reports follow.
var kernelOps = []struct{ op, name string }{
	{"tcx_first_attach", "TCX first attach on a hook"},
	{"tcx_next_attach", "TCX next attach on a hook"},
	{"tcx_last_detach", "TCX last detach from a hook"},
	{"tc_attach", "legacy TC attach (clsact + cls_bpf)"},
	{"detach", "detach"},
	{"program_load", "program load (trivial program)"},
	{"map_update", "map update (one element)"},
}

func kernelOpName(op string) string {
	for _, k := range kernelOps {
		if k.op == op {
			return k.name
		}
	}
	return op
}

// readAttach asks the daemon for its attach mode and kernel costs.
func (r *runner) readAttach(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := r.d.client.Inspect().GetStatus(ctx, &dpdv1.GetStatusRequest{})
	if err != nil {
		return fmt.Errorf("get status: %w", err)
	}
	a := st.GetAttach()
	if a == nil {
		return fmt.Errorf("dpd reports no attach mode or kernel costs")
	}
	r.res.Attach = attachFrom(a)
	r.res.Forwarding = st.GetWorkloadForwarding()
	r.res.ForwardingPeer = st.GetWorkloadRedirectPeer()
	r.progress("attach mode %s (%s), workload forwarding %q (established flows into the destination's namespace: %v)",
		r.res.Attach.Mode, r.res.Attach.Reason, r.res.Forwarding, r.res.ForwardingPeer)
	return nil
}

func attachFrom(a *dpdv1.AttachInfo) Attach {
	out := Attach{Mode: a.GetMode(), Reason: a.GetReason()}
	byOp := map[string]KernelCost{}
	var order []string
	for _, c := range a.GetCosts() {
		byOp[c.GetOp()] = KernelCost{
			Op: c.GetOp(), Probe: seconds(c.GetProbeSeconds()),
			Observed: seconds(c.GetObservedMeanSeconds()), Count: c.GetObservedCount(),
		}
		order = append(order, c.GetOp())
	}
	for _, k := range kernelOps {
		if c, ok := byOp[k.op]; ok {
			out.Costs = append(out.Costs, c)
			delete(byOp, k.op)
		}
	}
	for _, op := range order {
		if c, ok := byOp[op]; ok {
			out.Costs = append(out.Costs, c)
		}
	}
	return out
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// kernelSection renders the attach mode and the kernel costs of each pass.
func (r *Results) kernelSection(w writer) {
	w("## Kernel costs\n\n")
	w("Linux %s on %s. dpd measured these kernel operations at start (the probe: on a scratch veth, "+
		"median of three) and times its real ones since (observed: mean and count over the whole pass, read from "+
		"`Inspect/GetStatus` at the end of its daemon phases).\n\n", r.Machine.Kernel, r.Machine.cpuText())
	for _, p := range r.passes() {
		a := p.Attach
		if len(r.passes()) > 1 {
			w("**With %s** (`%s` = %s). ", rcuText(p.RCU), rcuExpeditedFile, orDash(p.RCU))
		}
		if a.Mode == "" {
			w("Not read: the daemon's GetStatus did not answer.\n\n")
			continue
		}
		w("Attach mode **%s**: %s.\n\n", a.Mode, a.Reason)
		w("| operation | probe | observed (mean) | observed count |\n| --- | --- | --- | --- |\n")
		for _, c := range a.Costs {
			w("| %s | %s | %s | %s |\n", kernelOpName(c.Op), costText(c.Probe), costText(c.Observed), countText(c))
		}
		w("\n")
	}
}

// tcxFirstText is the probe's first TCX attach ("-" without one).
func (r *Results) tcxFirstText() string {
	for _, c := range r.Attach.Costs {
		if c.Op == "tcx_first_attach" && c.Probe > 0 {
			return costText(c.Probe)
		}
	}
	return "-"
}

func costText(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Microsecond:
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	case d < 10*time.Microsecond:
		return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%.2f ms", ms(d))
}

func countText(c KernelCost) string {
	if c.Count == 0 {
		return "-"
	}
	return fmt.Sprint(c.Count)
}

// costLine is the costs on one line, for progress and the text output.
func (a Attach) costLine() string {
	s := "attach mode " + a.Mode
	for _, c := range a.Costs {
		if c.Probe > 0 {
			s += fmt.Sprintf(", %s %s", c.Op, costText(c.Probe))
		}
	}
	return s
}
