package linux

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// Preloading: a batch of endpoints with policies of their own (a cold
// start, a burst of new pods) would have acquire compile and load
// their programs one at a time on the engine's goroutine, and the load
// (verifier and JIT) dominates. PreloadPolicies loads the missing programs
// of the whole batch on every CPU first, without holding k.mu meanwhile
// (Inspect, fail-close and garbage collection must not wait for it). The
// programs join the policy programmer without references; acquire then takes them
// as it takes any loaded program, and EndApply releases the ones no
// endpoint took (its apply failed, its interface went away); the next
// batch does if an apply pass ended without that.
//
// Measured on the 2-vCPU development VM, two workers load little faster
// than one: the kernel serialises much of a load (the JIT copies the image
// with text_poke under text_mutex, with cross-CPU TLB flushes); the
// verifier and the compiler run in parallel. Either way the loads do not
// hold k.mu. (Policy programs have no direct tail calls, which used to
// double a load: see polprog's tailKey.)

// preloadJob is one distinct program to compile and load.
type preloadJob struct {
	key progKey
	pol *model.DirectionPolicy
}

// preloadEnv is what the workers need from the kernel, captured under k.mu
// so that they never read its fields.
type preloadEnv struct {
	pols *policyProgrammer // the programmer the jobs were planned for
	fac  programFacility   // its facility; Load is safe for concurrent use
	// gcMark is k.ops.GCRemovals at the capture: a collection since then
	// may have deleted counters a worker's Load created.
	gcMark uint64
}

// PreloadPolicies compiles and loads, in parallel, the policy programs the
// endpoints will need and that are neither loaded nor pinned by an earlier
// dpd (those are adopted, which loads nothing). Endpoints whose interface
// does not exist yet are skipped: their apply would not take the programs.
// Failures are only logged: applying the endpoint loads the program again
// and reports the error. Call it from the engine's goroutine, like
// ApplyEndpoint, before applying eps.
func (k *Kernel) PreloadPolicies(eps []*model.Endpoint) {
	k.preload(k.preloadCandidates(eps))
}

// preload loads the programs of jobs on min(GOMAXPROCS, jobs) workers.
func (k *Kernel) preload(jobs []preloadJob) {
	if len(jobs) == 0 {
		return
	}
	env, jobs, ok := k.planPreload(jobs)
	if !ok || len(jobs) == 0 {
		return
	}
	workers := min(runtime.GOMAXPROCS(0), len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(jobs) {
					return
				}
				k.preloadOne(env, jobs[i])
			}
		})
	}
	wg.Wait()
}

// preloadCandidates lists the distinct programs of eps whose interfaces
// exist. Hashing happens here, outside k.mu.
func (k *Kernel) preloadCandidates(eps []*model.Endpoint) []preloadJob {
	var jobs []preloadJob
	seen := map[progKey]bool{}
	for _, ep := range eps {
		if ep == nil {
			continue
		}
		if _, ok := k.links.Ifindex(ep.Iface); !ok {
			continue
		}
		for _, dir := range []model.Direction{model.Ingress, model.Egress} {
			pol := ep.Policy(dir)
			key := progKey{hash: pol.Hash(), dir: dir}
			if !seen[key] {
				seen[key] = true
				jobs = append(jobs, preloadJob{key: key, pol: pol})
			}
		}
	}
	return jobs
}

// planPreload drops the jobs whose programs are loaded or pinned already
// and captures the workers' environment. Unused preloads of an earlier
// batch go first.
func (k *Kernel) planPreload(jobs []preloadJob) (*preloadEnv, []preloadJob, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || k.pols == nil {
		return nil, nil, false
	}
	k.noteApplyLocked()
	return &preloadEnv{pols: k.pols, fac: k.pols.fac, gcMark: k.ops.GCRemovals}, k.pols.planPreload(jobs), true
}

// planPreload drops the jobs whose programs are loaded or pinned already,
// after releasing the unused preloads of an earlier batch.
func (p *policyProgrammer) planPreload(jobs []preloadJob) []preloadJob {
	p.releaseLeftovers(jobs)
	out := jobs[:0]
	for _, j := range jobs {
		if _, ok := p.progs[j.key]; ok {
			continue
		}
		if _, ok := p.pinned[j.key]; ok {
			continue // acquire adopts it (or replaces it if stale)
		}
		out = append(out, j)
	}
	return out
}

// preloadOne compiles and loads one program without k.mu, then records it.
func (k *Kernel) preloadOne(env *preloadEnv, j preloadJob) {
	prog, err := env.fac.Load(j.pol, j.key.dir)
	if err != nil {
		k.log.Debug("preload policy program failed; the endpoint's apply loads it again", "program", j.key, "err", err)
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.addPreloadLocked(env, j.key, prog)
}

// addPreloadLocked records a preloaded program, unless the kernel
// changed under the worker (closed, or reopened on other maps).
func (k *Kernel) addPreloadLocked(env *preloadEnv, key progKey, prog loadedProgram) {
	k.noteApplyLocked() // the batch's loads run without mu
	if k.closed || k.pols != env.pols {
		// Nothing points at it.
		if err := prog.Close(); err != nil {
			k.log.Debug("close unneeded preloaded policy program", "program", key, "err", err)
		}
		return
	}
	k.pols.addPreload(key, prog, k.ops.GCRemovals != env.gcMark)
}

// addPreload records a preloaded program without references, unless the
// program appeared meanwhile. collected says a collection ran during the
// load: it deletes the counters of rules no recorded program has, which
// may have been this one's.
func (p *policyProgrammer) addPreload(key progKey, prog loadedProgram, collected bool) {
	_, loaded := p.progs[key]
	_, pinned := p.pinned[key]
	if loaded || pinned {
		if err := prog.Close(); err != nil {
			p.log.Debug("close unneeded preloaded policy program", "program", key, "err", err)
		}
		return
	}
	if collected {
		ids := make([]uint64, 0, len(prog.Rules()))
		for _, r := range prog.Rules() {
			ids = append(ids, r.CounterID)
		}
		if err := p.fac.EnsureCounters(ids); err != nil {
			p.log.Warn("recreate rule counters of a preloaded policy program", "program", key, "err", err)
		}
	}
	p.setPreloaded(p.addLoaded(key, prog), true)
}

// releaseLeftovers drops the preloads of an earlier batch that no
// endpoint took, except those this batch needs again (an endpoint whose
// apply failed and is retried): a safety net should an apply pass end
// without releaseUnusedPreloads.
func (p *policyProgrammer) releaseLeftovers(jobs []preloadJob) {
	if len(p.unclaimed) == 0 {
		return
	}
	want := make(map[progKey]bool, len(jobs))
	for _, j := range jobs {
		want[j.key] = true
	}
	for key, sp := range p.unclaimed {
		if sp.refs == 0 && !want[key] {
			p.drop(sp)
		}
	}
}

// releaseUnusedPreloads closes and unpins the preloaded programs no
// endpoint took. EndApply calls it: by then every endpoint of the batch
// has been applied.
func (p *policyProgrammer) releaseUnusedPreloads() { p.releasePreloadsBefore(time.Now()) }

// releasePreloadsBefore releases the unused preloads loaded before
// t. The periodic collection passes a collection interval ago: a preload
// is taken within its apply pass, so an older unused one is a leftover of
// a pass that did not reach EndApply.
func (p *policyProgrammer) releasePreloadsBefore(t time.Time) {
	n := 0
	for _, sp := range p.unclaimed {
		if sp.refs == 0 && !sp.loadedAt.After(t) {
			p.drop(sp)
			n++
		}
	}
	if n > 0 {
		p.log.Debug("released preloaded policy programs no endpoint took", "programs", n)
	}
}

var _ engine.PolicyPreloader = (*Kernel)(nil)
