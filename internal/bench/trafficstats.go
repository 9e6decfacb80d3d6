package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// With Options.TrafficBPFStats, P7 reads the kernel's run time of dpd's
// entry programs (kernel.bpf_stats_enabled) around each dpd connection-rate
// measurement: the programs' own cost per connection, a figure the rate's
// noise on a shared machine does not blur. Enabling the statistics adds two
// clock reads to every program run (dpd's only, not the other paths'), so
// it is a diagnostic, off in the figures' runs.

// entryProgramNames are the programs every packet of a dpd pod passes; the
// policy programs and the epilogue they tail-call count in their run time.
var entryProgramNames = map[string]bool{"dpd_from_wep": true, "dpd_to_wep": true}

// bpfStats holds the daemon's entry programs open while statistics are on.
type bpfStats struct {
	enabled interface{ Close() error }
	progs   []*ebpf.Program
}

// progRun is the programs' summed statistics at one moment.
type progRun struct {
	runtime time.Duration
	runs    uint64
}

// openBPFStats turns statistics on and finds the entry programs among the
// descriptors process pid holds.
func openBPFStats(pid int) (*bpfStats, error) {
	ids, err := progIDsOf(pid)
	if err != nil {
		return nil, err
	}
	s := &bpfStats{}
	for _, id := range ids {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded since
		}
		info, err := p.Info()
		if err != nil || !entryProgramNames[info.Name] {
			_ = p.Close()
			continue
		}
		s.progs = append(s.progs, p)
	}
	if len(s.progs) == 0 {
		return nil, fmt.Errorf("dpd (pid %d) holds none of its entry programs", pid)
	}
	if s.enabled, err = ebpf.EnableStats(unix.BPF_STATS_RUN_TIME); err != nil {
		return nil, errors.Join(fmt.Errorf("enable BPF statistics: %w", err), s.close())
	}
	return s, nil
}

func (s *bpfStats) read() (progRun, error) {
	var r progRun
	for _, p := range s.progs {
		st, err := p.Stats()
		if err != nil {
			return r, fmt.Errorf("program statistics: %w", err)
		}
		r.runtime += st.Runtime
		r.runs += st.RunCount
	}
	return r, nil
}

func (s *bpfStats) close() error {
	var errs []error
	if s.enabled != nil {
		errs = append(errs, s.enabled.Close())
	}
	for _, p := range s.progs {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// progIDsOf lists the ids of the BPF programs process pid holds a
// descriptor of (fdinfo's prog_id lines).
func progIDsOf(pid int) ([]ebpf.ProgramID, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fdinfo")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("descriptors of pid %d: %w", pid, err)
	}
	var ids []ebpf.ProgramID
	for _, e := range ents {
		id, ok := fdinfoProgID(filepath.Join(dir, e.Name()))
		if ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func fdinfoProgID(path string) (ebpf.ProgramID, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false // closed since
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "prog_id:")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
		return ebpf.ProgramID(n), err == nil
	}
	return 0, false
}
