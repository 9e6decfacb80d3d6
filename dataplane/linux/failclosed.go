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
// reports such an interface it is queued for the attach worker
// (attachq.go), which attaches the entry programs with a dpd_ifstate entry
// lacking READY, so they drop everything until ApplyEndpoint installs the
// policy and sets READY. That covers an interface that appears before its
// WorkloadEndpointUpdate, one whose endpoint could not be programmed yet,
// one that appears while dpd waits for the controller after a restart, and
// one whose endpoint was removed (it stays failed closed). The entry
// programs drop everything also before the ifstate entry is written (no
// entry, no pass), so nothing is open between the two.

// WatchLinks runs the interface monitor until ctx ends, queueing for the
// attach worker every workload interface nothing has programmed before
// passing the change on, and runs the attach worker and the periodic
// garbage collection meanwhile. The callback runs on the monitor's
// delivery goroutine, not the one draining the netlink subscription, so
// waiting for k.mu behind an apply cannot make the subscription overflow;
// reports wait meanwhile, coalesced per interface (see nl.Monitor.Run).
// No attach runs in the callback.
func (k *Kernel) WatchLinks(ctx context.Context, report func(model.LinkUpdate)) error {
	gctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		k.gcLoop(gctx)
	}()
	go func() {
		defer wg.Done()
		k.attachLoop(gctx)
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
		st.unverify()
	}
	if !e.links.Matches(u.Name) {
		return
	}
	if u.State == model.LinkAbsent {
		if st != nil && st.ep == nil && !st.ready {
			if err := e.dropState(u.Name, st, nil, false); err != nil {
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

// closeLink queues the interface name, now ifindex, for the attach
// worker unless it is programmed or closed already; st is its state, nil
// if none.
func (e *endpointProgrammer) closeLink(name string, st *endpointState, ifindex int) {
	if st != nil && st.ifindex == ifindex && (st.ready || st.closed) {
		return // programmed, adopted, or closed already
	}
	e.queue.put(name, ifindex)
}

// planFailClose decides, under the lock, what failing closed name at
// ifindex takes: nil when nothing (programmed or closed meanwhile), or
// when the entry programs are known attached already and only the
// ifstate entry was missing (written here).
func (e *endpointProgrammer) planFailClose(name string, ifindex int) *attachPlan {
	st, tracked := e.eps[name]
	if tracked && st.ifindex == ifindex && (st.ready || st.closed) && (st.attachOK || st.mode != "") {
		return nil
	}
	if !tracked {
		st = e.newState()
	}
	if st.ifindex != 0 && st.ifindex != ifindex {
		e.forgetIfindex(st)
	}
	p := &attachPlan{st: st, name: name, ifindex: ifindex, query: !st.fresh || st.mode != "",
		owners: st.ep == nil, tracked: tracked}
	if st.attachOK && st.ifindex == ifindex {
		e.finishFailClose(p, attachResult{mode: st.mode})
		return nil
	}
	return p
}

// finishFailClose records, under the lock, the attach p ran, and writes
// the not-ready ifstate entry. An interface that vanished meanwhile (the
// change event just before a deletion) is not a warning.
func (e *endpointProgrammer) finishFailClose(p *attachPlan, r attachResult) {
	st, name := p.st, p.name
	if cur, tracked := e.eps[name]; cur != st && (p.tracked || tracked) {
		// Removed or replaced while the attach ran: its own apply or
		// event settles the interface.
		if r.attached {
			e.ops.Attaches++
		}
		return
	}
	if r.ownerErr != nil {
		e.log.Warn("cannot tell whose entry programs an interface carries; failing it closed", "iface", name, "err", r.ownerErr)
	}
	err := r.err
	if r.foreign {
		// Another dpd (other pins) polices it: taking its attachment over
		// for an interface we know nothing about would break it.
		err = errForeign
	} else {
		st.ifindex = p.ifindex
		e.record(p, r)
		if err == nil {
			if err = e.setIfState(st, abi.IfWorkload); err != nil {
				err = fmt.Errorf("ifstate %s: %w", name, err)
			} else {
				e.ops.FailClosed++
				e.log.Debug("workload interface fails closed until programmed", "iface", name, "ifindex", p.ifindex)
			}
		}
	}
	if err != nil {
		gone := e.linkGone(name, p.ifindex, err)
		if gone {
			// Nothing passes through a deleted interface. Pins a partial
			// attach left are garbage collection's.
			e.log.Debug("interface went away before it could fail closed", "iface", name, "ifindex", p.ifindex, "err", err)
		} else {
			e.log.Warn("cannot fail closed; the interface may pass unpoliced traffic", "iface", name, "err", err)
		}
		if !p.tracked && (gone || r.foreign) {
			return // nothing of ours is on it to track
		}
	}
	if !p.tracked {
		e.eps[name] = st
	}
}

// failCloseNow fails closed name at ifindex on the calling goroutine,
// holding the lock throughout: for the rare interfaces garbage collection
// finds carrying dpd's programs with no state (a crash's debris).
func (e *endpointProgrammer) failCloseNow(name string, ifindex int) {
	if e.queue.running[name] {
		return // the worker is attaching it
	}
	e.queue.take(name)
	if p := e.planFailClose(name, ifindex); p != nil {
		// Whatever the interface's age, an earlier dpd put programs on it.
		p.query = true
		e.finishFailClose(p, p.run(e.entry))
	}
}

// linkGone reports whether err, from working on name as ifindex, means the
// interface no longer exists: an error a vanished device gives (ENODEV from
// TCX, legacy TC and netlink, the library's LinkNotFoundError from a link
// lookup, nl.ErrNoLink from the configurer), or the monitor's cache, which runs
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
