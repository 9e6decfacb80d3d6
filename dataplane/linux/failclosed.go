package linux

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Fail closed: a workload interface (one matching InterfacePrefix) that
// nothing has programmed must not pass traffic unpoliced. When the monitor
// reports such an interface, before the engine hears of it, the entry
// programs are attached with a dpd_ifstate entry lacking READY, so they
// drop everything until ApplyEndpoint installs the policy and sets READY.
// That covers an interface that appears before its WorkloadEndpointUpdate,
// one whose endpoint could not be programmed yet, and one that appears
// while dpd waits for the controller after a restart.

// WatchLinks runs the interface monitor until ctx ends, failing closed
// every workload interface nothing has programmed before passing the
// change on, and runs the periodic garbage collection meanwhile. The
// callback runs on the monitor's delivery goroutine, not the one draining
// the netlink subscription, so waiting for k.mu behind an apply, and the
// attach syscalls under it, cannot make the subscription overflow; reports
// wait meanwhile, coalesced per interface (see nl.Monitor.Run).
func (k *Kernel) WatchLinks(ctx context.Context, report func(model.LinkUpdate)) error {
	gctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		k.gcLoop(gctx)
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()
	return k.mon.Run(ctx, func(u model.LinkUpdate) {
		k.onLink(u)
		report(u)
	})
}

// onLink hands a link change to the endpoint programmer.
func (k *Kernel) onLink(u model.LinkUpdate) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.eps.onLink(u)
}

// onLink forgets what was verified on the interface, keeps a reported
// workload interface fail-closed unless it is programmed (or adopted as
// programmed), and forgets the fail-closed state of one that went away.
func (e *endpointProgrammer) onLink(u model.LinkUpdate) {
	st := e.eps[u.Name]
	if st != nil {
		// A link that went down lost its routes; one that went away and
		// came back under the same ifindex (moved to another namespace and
		// back: the monitor may report only the return) lost its
		// attachments too. The next apply verifies everything.
		st.verified, st.attachOK = false, false
	}
	if !e.links.Matches(u.Name) {
		return
	}
	if u.State == model.LinkAbsent {
		if st != nil && st.ep == nil && !st.ready {
			if err := e.dropState(u.Name, st, nil); err != nil {
				e.log.Warn("forget fail-closed interface", "iface", u.Name, "err", err)
				return
			}
			delete(e.eps, u.Name)
		}
		return
	}
	ifindex, ok := e.links.Ifindex(u.Name)
	if !ok {
		return
	}
	e.closeLink(u.Name, st, ifindex)
}

// closeLink fails closed the interface name, now ifindex, unless it
// is programmed or closed already; st is its state, nil if none. One that
// vanishes meanwhile (the change event just before a deletion) is left for
// its absent event to clean up.
func (e *endpointProgrammer) closeLink(name string, st *endpointState, ifindex int) {
	if st != nil && st.ifindex == ifindex && (st.ready || st.closed) {
		return // programmed, adopted, or closed already
	}
	fresh := st == nil
	if fresh {
		st = e.newState()
	}
	if err := e.failClose(name, st, ifindex); err != nil {
		if e.linkGone(name, ifindex, err) {
			// Nothing passes through a deleted interface. The state is kept
			// (an attach may have pinned a link) for the absent event.
			e.log.Debug("interface went away before it could fail closed", "iface", name, "ifindex", ifindex, "err", err)
		} else {
			e.log.Warn("cannot fail closed; the interface may pass unpoliced traffic", "iface", name, "err", err)
		}
		if fresh && st.ifindex == 0 {
			return // nothing of ours is on it
		}
	}
	if fresh {
		e.eps[name] = st
	}
}

// linkGone reports whether err, from working on name as ifindex, means the
// interface no longer exists: an error a vanished device gives (ENODEV from
// TCX and netlink, the library's LinkNotFoundError from legacy TC,
// nl.ErrNoLink from the configurer), or the monitor's cache, which runs
// ahead of its reports, no longer knowing name as ifindex.
func (e *endpointProgrammer) linkGone(name string, ifindex int, err error) bool {
	if isNoDevice(err) {
		return true
	}
	idx, ok := e.links.Ifindex(name)
	return !ok || idx != ifindex
}

func isNoDevice(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.Is(err, unix.ENODEV) || errors.As(err, &nf) || errors.Is(err, nl.ErrNoLink)
}

var errForeign = errors.New("another dpd's entry programs are attached")

// failClose attaches the entry programs to ifindex with a dpd_ifstate
// entry that is not READY: every packet drops.
func (e *endpointProgrammer) failClose(name string, st *endpointState, ifindex int) error {
	if st.ifindex != 0 && st.ifindex != ifindex {
		e.forgetIfindex(st)
	}
	ours, foreign, err := e.entry.EntryOwners(ifindex)
	if err != nil {
		// Not knowing whose programs are there must not leave it open:
		// fail it closed as if nothing were attached.
		e.log.Warn("cannot tell whose entry programs an interface carries; failing it closed", "iface", name, "err", err)
	} else if foreign && !ours && st.ep == nil {
		// Another dpd (other pins) polices it: taking its attachment over
		// for an interface we know nothing about would break it.
		return errForeign
	}
	st.ifindex = ifindex
	if err := e.attach(st, name); err != nil {
		return err
	}
	if err := e.setIfState(st, abi.IfWorkload); err != nil {
		return fmt.Errorf("ifstate %s: %w", name, err)
	}
	e.ops.FailClosed++
	e.log.Debug("workload interface fails closed until programmed", "iface", name, "ifindex", ifindex)
	return nil
}
