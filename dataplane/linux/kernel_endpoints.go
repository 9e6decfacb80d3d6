package linux

import (
	"errors"
	"fmt"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// The engine-facing calls for endpoints and policy programs: each takes
// the kernel's lock and hands over to its programmer.

// ApplyEndpoint implements engine.EndpointKernel (see
// endpointProgrammer.apply). An attach the endpoint needs runs without the
// lock; one the attach worker is running for the same interface is waited
// for (and then trusted), one it has only queued is taken over. Other
// interfaces' attaches are never waited for.
func (k *Kernel) ApplyEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	defer k.noteApplyLocked() // at the end: the call may let go of mu to attach
	defer k.eps.endApply(ep.Iface)
	for range maxApplyRounds {
		k.waitAttachLocked(ep.Iface)
		k.loadOwnLocked(ep)
		if k.closed {
			return errKernelClosed
		}
		p, err := k.eps.apply(ep)
		switch {
		case err != nil:
			return err
		case p.loads:
			k.waitLoadsLocked(ep)
			continue
		case p.attach == nil:
			k.applyPreviewLocked(ep)
			return nil
		}
		r := k.runAttachLocked(p.attach)
		if k.closed {
			return errKernelClosed
		}
		k.eps.record(p.attach, r)
		if r.err != nil {
			return r.err
		}
	}
	return fmt.Errorf("attach %s: the interface changed under every attempt", ep.Iface)
}

// maxApplyRounds bounds how often one apply attaches an interface that
// keeps changing (re-created, or reported anew) while it is attached,
// with one more round for waiting on the endpoint's preloads.
const maxApplyRounds = 4

var errKernelClosed = errors.New("linux dataplane closed")

// RemoveEndpoint implements engine.EndpointKernel.
func (k *Kernel) RemoveEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	defer k.noteApplyLocked()
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

var _ engine.HostEndpointKernel = (*Kernel)(nil)
