package linux

import "github.com/dpd-dev/dpd/dataplane/model"

// The engine-facing calls for routes, tunnels and services: each takes the
// kernel's lock and hands over to its programmer.

// ApplyRoute implements engine.RouteKernel (see routeProgrammer.apply).
func (k *Kernel) ApplyRoute(r *model.Route) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.routes.apply(r)
}

// RemoveRoute implements engine.RouteKernel.
func (k *Kernel) RemoveRoute(r *model.Route) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.routes.remove(r)
}

// ApplyVTEP implements engine.TunnelKernel.
func (k *Kernel) ApplyVTEP(v *model.VTEP) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tunnels.applyVTEP(v)
}

// RemoveVTEP implements engine.TunnelKernel.
func (k *Kernel) RemoveVTEP(node string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tunnels.removeVTEP(node)
}

// ApplyHostMetadata implements engine.TunnelKernel.
func (k *Kernel) ApplyHostMetadata(h *model.HostMetadata) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tunnels.applyHost(h)
}

// RemoveHostMetadata implements engine.TunnelKernel.
func (k *Kernel) RemoveHostMetadata(hostname string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tunnels.removeHost(hostname)
}

// Hostname is the node name whose VTEP and routes are local.
func (k *Kernel) Hostname() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tunnels.hostname
}

// VXLANIfindex is the VXLAN device's ifindex, 0 when there is none.
func (k *Kernel) VXLANIfindex() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tunnels.ifindex
}

// ApplyService implements engine.ServiceKernel.
func (k *Kernel) ApplyService(s *model.Service) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.svcs.apply(s)
}

// RemoveService implements engine.ServiceKernel.
func (k *Kernel) RemoveService(s *model.Service) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.svcs.remove(s)
}
