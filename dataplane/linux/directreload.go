package linux

import (
	"log/slog"
	"time"
)

// Direct reloads. Policy programs load on the endpoint's path with the
// indirect epilogue call: a direct tail call makes the kernel patch the
// new program's text at load (text_poke), whose IPIs cost 0.3-1 ms a
// program on some VMs, more than the load itself. Where the datapath
// chose the direct call (it saves 5-10 ns a new flow under retpolines), a
// worker loads each program in use again with it in the background,
// writes the new one into every slot that runs the old one, moves the pin
// and closes the old one a grace period later, so that packets inside its
// chunks finish. The endpoint is up from the first load, and the swap
// changes no verdict: both programs hold the same rules and counters.

// reloadGrace is how long a replaced program stays loaded after the last
// slot stopped naming it: a packet takes microseconds through a policy.
const reloadGrace = 10 * time.Millisecond

// reloadQuiet is how long the engine must have left the kernel alone
// before the reloader starts a load: a pass's own loads would otherwise
// wait for the reload's text patching (a kernel-wide mutex, IPIs to every
// CPU). A pass that starts during a reload waits for that one only. With
// 2 ms, endpoints arriving every 20 ms met a reload often enough to
// raise P1's p99; under churn with shorter gaps programs stay indirect
// (a few ns more per new flow) until it pauses.
const reloadQuiet = 20 * time.Millisecond

// directReloader is the worker's state; busy and retired are guarded by
// Kernel.mu.
type directReloader struct {
	wake chan struct{} // capacity 1: work may be queued
	stop chan struct{}
	busy bool // a load runs without Kernel.mu, on the datapath's maps
	// retired are replaced programs no slot names, closed after the grace.
	retired []retiredProg
	// now is the clock of the grace and the quiet period (tests stop it).
	now func() time.Time
}

type retiredProg struct {
	prog loadedProgram
	at   time.Time
}

// noteApplyLocked records that the engine is programming the kernel: the
// reloader waits reloadQuiet after the last such call.
func (k *Kernel) noteApplyLocked() { k.lastApply = time.Now() }

// startReloaderLocked starts the worker when the datapath calls the
// epilogue directly.
func (k *Kernel) startReloaderLocked() {
	if !k.pols.fac.DirectEpilogue() {
		return
	}
	r := &directReloader{wake: make(chan struct{}, 1), stop: make(chan struct{}), now: time.Now}
	k.reloader = r
	go k.runReloader(r)
}

// stopReloaderLocked stops the worker and waits for its load, which uses
// the datapath the caller is about to close.
func (k *Kernel) stopReloaderLocked() {
	r := k.reloader
	if r == nil {
		return
	}
	k.reloader = nil
	close(r.stop)
	for r.busy {
		k.attachCond.Wait()
	}
	r.abandonRetired()
}

// wakeReloaderLocked tells the worker that programs may wait for it.
func (k *Kernel) wakeReloaderLocked() {
	if k.reloader == nil || len(k.pols.reloadQ) == 0 {
		return
	}
	select {
	case k.reloader.wake <- struct{}{}:
	default:
	}
}

func (k *Kernel) runReloader(r *directReloader) {
	for {
		select {
		case <-r.stop:
			return
		case <-r.wake:
		}
		for {
			more, wait := k.reloadOne(r)
			if wait > 0 {
				select {
				case <-r.stop:
					return
				case <-time.After(wait):
				}
				continue
			}
			if !more {
				break
			}
		}
		select {
		case <-r.stop:
			return
		case <-time.After(reloadGrace):
		}
		k.mu.Lock()
		if k.reloader == r {
			r.closeRetired(k.log, time.Time{})
		}
		k.mu.Unlock()
	}
}

// reloadOne reloads the next queued program and reports whether the
// worker should go on, or how long to wait for the engine to be quiet.
func (k *Kernel) reloadOne(r *directReloader) (more bool, wait time.Duration) {
	k.mu.Lock()
	if k.reloader != r {
		k.mu.Unlock()
		return false, 0
	}
	now := r.now()
	r.closeRetired(k.log, now.Add(-reloadGrace))
	if d := reloadQuiet - now.Sub(k.lastApply); d > 0 && len(k.pols.reloadQ) > 0 {
		k.mu.Unlock()
		return true, d
	}
	sp := k.pols.nextReload()
	if sp == nil {
		k.mu.Unlock()
		return false, 0
	}
	old, pol, fac := sp.prog, sp.pol, k.pols.fac
	r.busy = true
	k.mu.Unlock()

	nw, err := fac.LoadDirect(pol, sp.key.dir)

	k.mu.Lock()
	defer k.mu.Unlock()
	r.busy = false
	k.attachCond.Broadcast()
	if err != nil {
		k.log.Warn("reload a policy program with the direct epilogue call; it keeps the indirect one", "program", sp.key, "err", err)
		sp.reload = false
		return k.reloader == r, 0
	}
	if k.reloader != r || k.pols.progs[sp.key] != sp || sp.prog != old {
		closeUnused(k.log, sp.key, nw) // stopped, or the program went meanwhile
		return k.reloader == r, 0
	}
	if rolledBack, err := k.eps.jumps.replace(old, nw); err != nil {
		k.log.Warn("install a reloaded policy program; the old one stays", "program", sp.key, "err", err)
		if rolledBack {
			closeUnused(k.log, sp.key, nw)
		} // else a slot still runs nw: it stays loaded (and leaks, unpinned)
		sp.reload = false
		return true, 0
	}
	k.pols.replace(sp, nw)
	r.retired = append(r.retired, retiredProg{old, r.now()})
	k.ops.ProgramReloads++
	return true, 0
}

func closeUnused(log *slog.Logger, key progKey, p loadedProgram) {
	if err := p.Close(); err != nil {
		log.Debug("close unused policy program", "program", key, "err", err)
	}
}

// abandonRetired lets go of the replaced programs without the grace:
// their dpd_chain entries stay for the packets still inside them, and
// garbage collection removes them later (no one owns them).
func (r *directReloader) abandonRetired() {
	for _, p := range r.retired {
		p.prog.Abandon()
	}
	clear(r.retired)
	r.retired = nil
}

// closeRetired closes the replaced programs retired before before (all
// of them when before is zero).
func (r *directReloader) closeRetired(log *slog.Logger, before time.Time) {
	keep := r.retired[:0]
	for _, p := range r.retired {
		if !before.IsZero() && p.at.After(before) {
			keep = append(keep, p)
			continue
		}
		if err := p.prog.Close(); err != nil {
			log.Warn("close a replaced policy program", "err", err)
		}
	}
	clear(r.retired[len(keep):])
	r.retired = keep
}

// compactReloadQ drops the queued programs that went or no longer wait,
// so that the queue stays within the programs loaded.
func (p *policyProgrammer) compactReloadQ() {
	keep := p.reloadQ[:0]
	for _, sp := range p.reloadQ {
		if p.progs[sp.key] == sp && sp.reload {
			keep = append(keep, sp)
		} else {
			sp.queued = false
		}
	}
	clear(p.reloadQ[len(keep):])
	p.reloadQ = keep
}

// nextReload pops the oldest queued program still in use and waiting.
func (p *policyProgrammer) nextReload() *sharedProg {
	for len(p.reloadQ) > 0 {
		sp := p.reloadQ[0]
		p.reloadQ[0] = nil
		p.reloadQ = p.reloadQ[1:]
		sp.queued = false
		if p.progs[sp.key] == sp && sp.reload && sp.refs > 0 && sp.pol != nil {
			return sp
		}
	}
	p.reloadQ = nil
	return nil
}

// replace makes nw sp's program once every slot runs it; the pin moves
// to nw. A pin left on the old program is adopted by a restart instead;
// a crash between the unpin and the pin leaves nw unpinned, and the next
// dpd loads that endpoint's program anew.
func (p *policyProgrammer) replace(sp *sharedProg, nw loadedProgram) {
	old := sp.prog
	sp.prog, sp.reload = nw, false
	if err := old.Unpin(); err != nil {
		p.log.Warn("unpin a replaced policy program", "program", sp.key, "err", err)
		return
	}
	p.pin(sp)
}
