package linux

// WorkloadForwarding says how packets between this node's workloads
// travel: "redirect" or "stack" (Options.StackForwarding).
func (k *Kernel) WorkloadForwarding() string {
	if k.opts.StackForwarding {
		return "stack"
	}
	return "redirect"
}
