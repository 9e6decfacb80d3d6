package linux

import "github.com/dpd-dev/dpd/dataplane/model"

// Routes and services are recorded but not yet enforced: the BPF NAT and
// route maps arrive with the services-and-routes work. Recording them keeps
// Inspect truthful about what the controller asked for.

// ApplyRoute implements dataplane.RouteKernel.
func (k *Kernel) ApplyRoute(r *model.Route) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.routes[r.Dst.String()] = r
	return nil
}

// RemoveRoute implements dataplane.RouteKernel.
func (k *Kernel) RemoveRoute(r *model.Route) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.routes, r.Dst.String())
	return nil
}

// ApplyService implements dataplane.ServiceKernel.
func (k *Kernel) ApplyService(s *model.Service) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.services[s.Key] = s
	return nil
}

// RemoveService implements dataplane.ServiceKernel.
func (k *Kernel) RemoveService(s *model.Service) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.services, s.Key)
	return nil
}
