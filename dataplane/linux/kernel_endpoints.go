package linux

import (
	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
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

// Rules returns the counter table of the program installed for an
// interface's direction, for Inspect and trace.
func (k *Kernel) Rules(iface string, dir model.Direction) ([]polprog.RuleInfo, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, ok := k.eps.eps[iface]
	if !ok || st.inst[dir] == nil || st.inst[dir].prog == nil {
		return nil, false
	}
	return st.inst[dir].prog.Rules(), true
}

// ProgramCount is how many distinct policy programs are loaded.
func (k *Kernel) ProgramCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.pols.progs)
}
