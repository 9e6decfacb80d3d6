package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/dpd-dev/dpd/proto/felix"
)

// runner holds one run's state.
type runner struct {
	o    Options
	res  *Results
	node *node
	d    *daemon
	ctl  *controller
}

// warn records what makes the results less than complete, and says so.
func (r *runner) warn(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	r.res.Warnings = append(r.res.Warnings, msg)
	r.progress("warning: %s", msg)
}

func (r *runner) progress(format string, a ...any) {
	if r.o.Progress != nil {
		_, _ = fmt.Fprintf(r.o.Progress, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, a...))
	}
}

// Run measures every figure: the daemon phases in order (P3 and P6 on a
// fresh daemon, then P2 on the same endpoints, then both P1 variants),
// then the go benchmarks (P4, P5), which run even when a daemon phase
// failed. It returns what was measured with the errors. Everything it
// created is gone when it returns.
func Run(ctx context.Context, o Options) (res *Results, err error) {
	if err := o.Scale.validate(); err != nil {
		return nil, fmt.Errorf("scale: %w", err)
	}
	if o.Socket == "" && o.DPD == "" {
		return nil, errors.New("neither a dpd binary to start nor a socket to attach to")
	}
	if o.PinRoot == "" {
		o.PinRoot = "/sys/fs/bpf"
	}
	r := &runner{o: o, res: &Results{
		Scale: o.Scale, Machine: describeMachine(), Started: time.Now(), Attached: o.Socket != "",
		Load: Load{LoadAvg: loadAvg()},
	}}
	defer func() {
		r.res.Elapsed = time.Since(r.res.Started)
		if cerr := r.cleanup(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup: %w", cerr))
		}
	}()
	for _, what := range removeLeftovers(o.PinRoot) {
		r.progress("removed a killed run's %s", what)
	}
	if found, err := restoreKilledRCU(rcuExpeditedFile, rcuMarkerFile); err != nil {
		r.warn("a killed run's RCU setting: %v", err)
	} else if found != "" {
		r.progress("put back a killed run's RCU setting: %s=%s", rcuExpeditedFile, found)
	}
	r.res.RCU, _ = readRCU(rcuExpeditedFile) // "" where the kernel has no such switch
	phaseErr := r.daemonPass(ctx)
	if ctx.Err() != nil { // interrupted: measure nothing more
		return r.res, errors.Join(phaseErr, context.Cause(ctx))
	}
	if o.SwitchRCU && o.Socket == "" {
		phaseErr = errors.Join(phaseErr, r.switchedPass(ctx))
		if ctx.Err() != nil {
			return r.res, errors.Join(phaseErr, context.Cause(ctx))
		}
	}
	if o.OnlyTraffic {
		return r.res, phaseErr
	}
	if o.SourceDir == "" {
		r.res.Warnings = append(r.res.Warnings, "P4 and P5 not measured: no source directory to run the go benchmarks in")
		return r.res, phaseErr
	}
	// P4 and P5 do not need the daemon: they are measured even when a
	// daemon phase failed.
	return r.res, errors.Join(phaseErr, r.goBenchmarks(ctx))
}

// daemonPass runs the daemon phases and stops the daemon, freeing the
// machine for what follows.
func (r *runner) daemonPass(ctx context.Context) error {
	err := r.daemonPhases(ctx)
	if err != nil && r.d != nil && r.d.proc != nil {
		err = fmt.Errorf("%w\n%s", err, r.d.logTail(30))
	}
	if cerr := r.cleanup(); cerr != nil {
		r.warn("stopping dpd after the daemon phases: %v", cerr)
	}
	return err
}

// switchedPass runs the daemon phases again, on a fresh daemon, with the
// kernel's RCU grace periods switched (rcu.go), and puts the setting back.
// Its figures go to Results.Switched, its warnings to the run's.
func (r *runner) switchedPass(ctx context.Context) (err error) {
	sw, err := switchRCU(rcuExpeditedFile, rcuMarkerFile)
	if err != nil {
		r.warn("the daemon phases were not measured with the RCU setting switched: %v", err)
		return nil
	}
	defer func() {
		if rerr := sw.restore(); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	o := r.o
	if o.DaemonLog != "" {
		ext := filepath.Ext(o.DaemonLog)
		o.DaemonLog = strings.TrimSuffix(o.DaemonLog, ext) + "-rcu_expedited" + sw.switched() + ext
	}
	sub := &runner{o: o, res: &Results{
		Scale: o.Scale, Machine: r.res.Machine, Started: time.Now(), RCU: sw.switched(),
		Load: Load{LoadAvg: loadAvg()},
	}}
	r.res.Switched = sub.res
	if normal, _ := readRCU(rcuNormalFile); normal == "1" {
		r.warn("%s=1 makes every grace period a normal one: the switched pass runs on the same kind of kernel", rcuNormalFile)
	}
	label := rcuText(sw.switched())
	r.progress("the daemon phases again with %s (%s=%s)", label, rcuExpeditedFile, sw.switched())
	err = sub.daemonPass(ctx)
	sub.res.Elapsed = time.Since(sub.res.Started)
	for _, w := range sub.res.Warnings {
		r.res.Warnings = append(r.res.Warnings, "with "+label+": "+w)
	}
	sub.res.Warnings = nil
	if err != nil {
		return fmt.Errorf("with %s: %w", label, err)
	}
	return nil
}

func (r *runner) daemonPhases(ctx context.Context) error {
	var err error
	if r.o.Socket != "" {
		// Attach first: a daemon that cannot be measured fails the run
		// before anything is created.
		r.res.Warnings = append(r.res.Warnings,
			"attached to a running dpd: P3 is not a fresh start, and P6 is its peak since it started")
		if r.d, err = attachDaemon(ctx, r.o.Socket); err != nil {
			return err
		}
		if r.node, err = openNode(r.o.NetNS); err != nil {
			return err
		}
		if err := r.createVethsUnlessOnlyTraffic(); err != nil {
			return err
		}
	} else {
		// The veths exist before dpd starts, as on a node whose dpd
		// restarts under running pods.
		if r.node, err = newNode(); err != nil {
			return err
		}
		if err := r.createVethsUnlessOnlyTraffic(); err != nil {
			return err
		}
		if r.d, err = startDaemon(ctx, r.o.DPD, r.node, r.o.PinRoot, r.o.DaemonLog, r.o.DaemonArgs); err != nil {
			return err
		}
	}
	r.progress("dpd pid %d serving on %s", r.d.pid, r.d.socket)
	// The observed costs cover every phase: read them last, whatever
	// failed (the probe's are there from the start).
	defer func() {
		if err := r.readAttach(ctx); err != nil {
			r.warn("kernel costs not read: %v", err)
		} else {
			r.progress("%s", r.res.Attach.costLine())
		}
	}()
	if r.o.OnlyTraffic {
		if err := r.trafficSession(ctx); err != nil {
			return err
		}
	} else if err := r.scalePhases(ctx); err != nil {
		return err
	}
	if r.o.NoTraffic {
		return nil
	}
	// P7 loads the machine with traffic of its own: it runs after the
	// window the load figures cover.
	if err := r.traffic(ctx); err != nil {
		return fmt.Errorf("P7: %w", err)
	}
	return nil
}

// scalePhases are P3, P6, P2 and P1, with the machine's load measured
// over them.
func (r *runner) scalePhases(ctx context.Context) error {
	var err error
	if before, err := sampleCPU(r.d.pid); err == nil {
		defer func() {
			if after, err := sampleCPU(r.d.pid); err == nil {
				l := &r.res.Load
				l.DPD, l.Driver, l.Other = loadBetween(before, after)
				r.progress("CPU over the daemon phases: dpd %.0f%%, driver %.0f%%, everything else %.0f%% of the machine",
					100*l.DPD, 100*l.Driver, 100*l.Other)
			}
		}()
	}
	if err := r.coldStart(ctx); err != nil {
		return fmt.Errorf("P3: %w", err)
	}
	if err := r.fanout(ctx); err != nil {
		return fmt.Errorf("P2: %w", err)
	}
	if r.res.Cold.Teardown, err = r.removeEndpoints(ctx, batchColdStart, r.o.Scale.Endpoints); err != nil {
		if ctx.Err() != nil {
			return err
		}
		r.warn("removing P3's endpoints: %v", err)
	}
	r.deleteVeths(batchColdStart)
	return r.p1(ctx)
}

// trafficSession opens the controller session P3 would have opened,
// with the namespace profile as its snapshot, for P7 alone.
func (r *runner) trafficSession(ctx context.Context) error {
	tr := newTracker()
	r.ctl = connect(r.d.client, []*felix.ToDataplane{profile()}, tr)
	ctx, cancel := context.WithTimeout(ctx, r.o.Scale.PhaseTimeout)
	defer cancel()
	if _, err := tr.awaitInSync(ctx, 1); err != nil {
		return err
	}
	return r.ctl.healthy()
}

func (r *runner) createVethsUnlessOnlyTraffic() error {
	if r.o.OnlyTraffic {
		return nil
	}
	return r.createVeths()
}

// createVeths makes P3's veth pairs, timed.
func (r *runner) createVeths() error {
	n := r.o.Scale.Endpoints
	r.progress("creating %d veth pairs in namespace %q", n, r.node.name)
	start := time.Now()
	for i := range n {
		if err := r.node.addVeth(batchColdStart, i); err != nil {
			return err
		}
	}
	r.res.Veths, r.res.VethTime = n, time.Since(start)
	r.progress("created %d veth pairs in %s", n, round(r.res.VethTime))
	return nil
}

// deleteVeths deletes a batch's veths once its endpoints are gone, so the
// node holds no more workload interfaces than the scale says (stale veths
// would make every per-device cost of the next phase larger).
func (r *runner) deleteVeths(batch byte) {
	start := time.Now()
	if err := r.node.deleteBatch(batch); err != nil {
		r.warn("%v", err)
		return
	}
	r.progress("deleted the veths of batch %c in %s", batch, round(time.Since(start)))
}

// awaitIdle waits until dpd has used at most one clock tick of CPU, and the
// whole machine at most quietTicks, in each of two consecutive 100 ms
// windows, so a phase starts on a settled node rather than on the tail of
// the previous phase's teardown (the kernel frees programs and deleted
// veths in its own workers, after dpd is done). pid 0 watches the machine
// alone. After limit it gives up with a warning.
func (r *runner) awaitIdle(ctx context.Context, pid int, limit time.Duration) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(limit)
	prev, err := sampleCPU(pid)
	quiet := 0
	for err == nil && quiet < 2 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var cur cpuSample
		if cur, err = sampleCPU(pid); err != nil {
			break
		}
		if cur.dpd-prev.dpd <= 1 && cur.busy-prev.busy <= quietTicks {
			quiet++
		} else {
			quiet = 0
		}
		prev = cur
		if time.Now().After(deadline) {
			r.warn("the node is still busy %s after the previous phase; measuring anyway", limit)
			return
		}
	}
}

// quietTicks is how many clock ticks of CPU (all cores together) a
// 100 ms window may hold for the machine to count as quiet: the driver's
// own polling and a stray timer, not a kernel worker tearing down veths.
const quietTicks = 3

// cleanup ends the session, stops a started daemon (removing its pins)
// and deletes the namespace or veths; it is safe to call twice.
func (r *runner) cleanup() error {
	var errs []error
	if r.ctl != nil {
		r.ctl.close()
		r.ctl = nil
	}
	if r.d != nil {
		errs = append(errs, r.d.stop(r.o.DaemonLog))
		r.d = nil
	}
	if r.node != nil {
		errs = append(errs, r.node.close())
		r.node = nil
	}
	return errors.Join(errs...)
}
