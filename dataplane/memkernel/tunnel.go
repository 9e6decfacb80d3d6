package memkernel

import (
	"net"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Method names of the TunnelKernel calls.
const (
	MethodApplyVTEP          = "ApplyVTEP"
	MethodRemoveVTEP         = "RemoveVTEP"
	MethodApplyHostMetadata  = "ApplyHostMetadata"
	MethodRemoveHostMetadata = "RemoveHostMetadata"
)

// ApplyVTEP records v.
func (k *Kernel) ApplyVTEP(v *model.VTEP) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodApplyVTEP, v.Node); err != nil {
		return err
	}
	c := *v
	c.MAC = append(net.HardwareAddr(nil), v.MAC...)
	k.vteps[v.Node] = c
	return nil
}

// RemoveVTEP forgets node's VTEP.
func (k *Kernel) RemoveVTEP(node string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodRemoveVTEP, node); err != nil {
		return err
	}
	delete(k.vteps, node)
	return nil
}

// ApplyHostMetadata records h.
func (k *Kernel) ApplyHostMetadata(h *model.HostMetadata) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodApplyHostMetadata, h.Hostname); err != nil {
		return err
	}
	k.hosts[h.Hostname] = *h
	return nil
}

// RemoveHostMetadata forgets hostname.
func (k *Kernel) RemoveHostMetadata(hostname string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodRemoveHostMetadata, hostname); err != nil {
		return err
	}
	delete(k.hosts, hostname)
	return nil
}

// VTEPs returns every recorded VTEP, sorted by node.
func (k *Kernel) VTEPs() []model.VTEP {
	k.mu.Lock()
	defer k.mu.Unlock()
	return sortedValues(k.vteps, func(v model.VTEP) string { return v.Node })
}

// HostMetadata returns the recorded addresses of hostname.
func (k *Kernel) HostMetadata(hostname string) (model.HostMetadata, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	h, ok := k.hosts[hostname]
	return h, ok
}
