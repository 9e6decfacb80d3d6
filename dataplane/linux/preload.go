package linux

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// Preloading: a batch of endpoints with policies of their own (a cold
// start, a burst of new pods) would have acquire compile and load
// their programs one at a time on the engine's goroutine, and the load
// (verifier and JIT) dominates. PreloadPolicies starts loading the missing
// programs of the whole batch on every CPU and returns: the engine goes
// on applying the batch's endpoints meanwhile. An endpoint's apply loads
// itself those of its programs no worker has started yet (loadOwnLocked),
// and waits for the others in its ApplyEndpoint with k.mu released
// (applyPlan.loads), after writing what does not need the program (the
// routes of an interface that drops until ready). So the first endpoint
// is up after its own two loads, not after the batch's, and its routes
// cost no time of their own. The programs join the policy programmer
// without references; acquire then takes them as it takes any loaded
// program, and EndApply waits for the workers and releases the ones no
// endpoint took (its apply failed, its interface went away); the next
// batch does if an apply pass ended without that. Close and a reopen of
// the datapath wait for the workers too: they use its maps.
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

// PreloadPolicies starts compiling and loading, in parallel, the policy
// programs the endpoints will need and that are neither loaded, loading
// nor pinned by an earlier dpd (those are adopted, which loads nothing).
// Endpoints whose interface does not exist yet are skipped: their apply
// would not take the programs. Failures are only logged: applying the
// endpoint loads the program again and reports the error. Call it from the
// engine's goroutine, like ApplyEndpoint, before applying eps.
func (k *Kernel) PreloadPolicies(eps []*model.Endpoint) {
	k.startPreload(k.preloadCandidates(eps))
}

// preload loads the programs of jobs and returns when they are loaded.
func (k *Kernel) preload(jobs []preloadJob) {
	k.startPreload(jobs)
	k.awaitPreloads()
}

// startPreload starts loading the programs of jobs on min(GOMAXPROCS,
// jobs) workers.
func (k *Kernel) startPreload(jobs []preloadJob) {
	if len(jobs) == 0 {
		return
	}
	b, workers := k.planPreload(jobs)
	for range workers {
		go func() {
			defer k.preloadWorkerDone()
			for {
				i, ok := b.next()
				if !ok {
					return
				}
				k.preloadOne(b.env, b.jobs[i])
			}
		}()
	}
}

// preloadBatch is the jobs of one PreloadPolicies call. Workers take them
// in order; an apply that finds one of its own programs not taken yet
// loads it itself (loadOwnLocked).
type preloadBatch struct {
	env    *preloadEnv
	jobs   []preloadJob
	taken  []atomic.Bool
	cursor atomic.Int64
}

// next takes the first job nobody has taken.
func (b *preloadBatch) next() (int, bool) {
	for {
		i := int(b.cursor.Add(1)) - 1
		if i >= len(b.jobs) {
			return 0, false
		}
		if b.take(i) {
			return i, true
		}
	}
}

// take claims job i; false when a worker (or an apply) has.
func (b *preloadBatch) take(i int) bool { return b.taken[i].CompareAndSwap(false, true) }

// preloadClaim is a program being preloaded: job i of batch.
type preloadClaim struct {
	batch *preloadBatch
	i     int
}

// loadOwnLocked loads, on the calling goroutine and with k.mu released,
// each program of ep that a preload planned and no worker has started:
// the workers were idle and take a while to be scheduled (on the 2-vCPU
// development VM about 160 µs), which the apply would only wait out, and
// this goroutine is running. It counts as a worker meanwhile, so Close and
// EndApply wait for its load as for theirs.
func (k *Kernel) loadOwnLocked(ep *model.Endpoint) {
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		if len(k.pols.loading) == 0 {
			return
		}
		c, ok := k.pols.loading[progKey{hash: ep.Policy(dir).Hash(), dir: dir}]
		if !ok || !c.batch.take(c.i) {
			continue
		}
		k.preloadWorkers++
		k.mu.Unlock()
		k.preloadOne(c.batch.env, c.batch.jobs[c.i])
		k.mu.Lock()
		k.preloadWorkerDoneLocked()
	}
}

// preloadWorkerDone counts a worker out.
func (k *Kernel) preloadWorkerDone() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.preloadWorkerDoneLocked()
}

func (k *Kernel) preloadWorkerDoneLocked() {
	k.preloadWorkers--
	k.attachCond.Broadcast()
}

// awaitPreloads returns when no preload worker runs.
func (k *Kernel) awaitPreloads() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.waitPreloadsLocked()
}

// waitPreloadsLocked waits, releasing k.mu meanwhile, until no preload
// worker runs.
func (k *Kernel) waitPreloadsLocked() {
	for k.preloadWorkers > 0 {
		k.attachCond.Wait()
	}
}

// waitLoadsLocked waits, releasing k.mu meanwhile, until no program of ep
// is being preloaded.
func (k *Kernel) waitLoadsLocked(ep *model.Endpoint) {
	for !k.closed && k.pols.loadingFor(ep) {
		k.attachCond.Wait()
	}
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

// planPreload drops the jobs whose programs are loaded, loading or pinned
// already, marks the others loading and counts their workers in, and
// captures the workers' environment in the batch. Unused preloads of an
// earlier batch go first.
func (k *Kernel) planPreload(jobs []preloadJob) (*preloadBatch, int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || k.pols == nil {
		return nil, 0
	}
	k.noteApplyLocked()
	jobs = k.pols.planPreload(jobs)
	b := &preloadBatch{env: &preloadEnv{pols: k.pols, fac: k.pols.fac, gcMark: k.ops.GCRemovals},
		jobs: jobs, taken: make([]atomic.Bool, len(jobs))}
	for i, j := range jobs {
		k.pols.loading[j.key] = preloadClaim{batch: b, i: i}
	}
	workers := min(runtime.GOMAXPROCS(0), len(jobs))
	k.preloadWorkers += workers
	return b, workers
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
		if _, ok := p.loading[j.key]; ok {
			continue
		}
		out = append(out, j)
	}
	return out
}

// preloadOne compiles and loads one program without k.mu, then records it
// and wakes the applies waiting for it.
func (k *Kernel) preloadOne(env *preloadEnv, j preloadJob) {
	prog, err := env.fac.Load(j.pol, j.key.dir)
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(env.pols.loading, j.key)
	k.attachCond.Broadcast()
	if err != nil {
		k.log.Debug("preload policy program failed; the endpoint's apply loads it again", "program", j.key, "err", err)
		return
	}
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

// loadingFor reports whether a program of ep is being preloaded.
func (p *policyProgrammer) loadingFor(ep *model.Endpoint) bool {
	if len(p.loading) == 0 {
		return false
	}
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		if _, ok := p.loading[progKey{hash: ep.Policy(dir).Hash(), dir: dir}]; ok {
			return true
		}
	}
	return false
}
