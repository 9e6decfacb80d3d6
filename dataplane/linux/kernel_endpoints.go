package linux

import (
	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// The engine-facing calls for endpoints and policy programs: each takes
// the kernel's lock and hands over to its programmer.

// ApplyEndpoint implements engine.EndpointKernel (see
// endpointProgrammer.apply).
func (k *Kernel) ApplyEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.eps.apply(ep)
}

// RemoveEndpoint implements engine.EndpointKernel.
func (k *Kernel) RemoveEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.eps.remove(ep)
}

var _ engine.Resyncer = (*Kernel)(nil)

// Resync implements engine.Resyncer: the next ApplyEndpoint of every
// interface re-reads the kernel instead of trusting what this process did.
func (k *Kernel) Resync() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.eps.resync()
}

// Endpoint returns what is programmed on iface.
func (k *Kernel) Endpoint(iface string) (EndpointDetails, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.eps.details(iface)
}

// ProgramCount is how many distinct policy programs are loaded.
func (k *Kernel) ProgramCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.pols.progs)
}
