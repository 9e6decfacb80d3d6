package linux

import (
	"github.com/dpd-dev/dpd/dataplane/model"
)

// AttachInfo reports the attach mode, why it was chosen, and the kernel
// costs: the start-up probe's, and those observed on real attaches since
// (an interface's attach is the first on its hooks, so it pairs with the
// probe's first attach).
func (k *Kernel) AttachInfo() model.AttachInfo {
	k.mu.Lock()
	obs := k.bpf.ObservedCosts()
	k.mu.Unlock()
	c := k.attach.Costs
	return model.AttachInfo{
		Mode:   string(k.attach.Mode),
		Reason: k.attach.Reason,
		Costs: []model.KernelCost{
			{Op: "tcx_first_attach", Probe: c.TCXFirstAttach, ObservedMean: obs.TCXAttach.Mean(), ObservedCount: obs.TCXAttach.Count},
			{Op: "tcx_next_attach", Probe: c.TCXNextAttach},
			{Op: "tcx_last_detach", Probe: c.TCXLastDetach},
			{Op: "tc_attach", Probe: c.LegacyAttach, ObservedMean: obs.TCAttach.Mean(), ObservedCount: obs.TCAttach.Count},
			{Op: "detach", ObservedMean: obs.Detach.Mean(), ObservedCount: obs.Detach.Count},
			{Op: "program_load", Probe: c.ProgramLoad},
			{Op: "map_update", Probe: c.MapUpdate},
		},
	}
}
