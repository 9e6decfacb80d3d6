package linux

// WorkloadForwarding says how packets between this node's workloads
// travel: "redirect" or "stack" (Options.StackForwarding).
func (k *Kernel) WorkloadForwarding() string {
	if k.opts.StackForwarding {
		return "stack"
	}
	return "redirect"
}

// WorkloadRedirectPeer says whether a redirected packet of an established
// flow goes straight into the destination's namespace
// (Options.HostSideDelivery off).
func (k *Kernel) WorkloadRedirectPeer() bool {
	return !k.opts.StackForwarding && !k.opts.HostSideDelivery
}
