package bpffs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// What Check found, as Report.Found says it.
const (
	// FoundHostNamespace: dpd runs in the host's own mount namespace, so
	// the bpffs it sees is the one every later dpd sees.
	FoundHostNamespace = "host-mount-namespace"
	// FoundHost: dpd runs in a mount namespace of its own, and the bpffs
	// holding the pin directory is one the host's init (PID 1) has mounted.
	FoundHost = "host-bpffs"
	// FoundUnverified: a bpffs is mounted, but the host's mounts are out of
	// sight (dpd has a PID namespace of its own, as in a container), so it
	// is taken to be the host's, mounted in.
	FoundUnverified = "unverified"
	// FoundMounted: no bpffs was mounted; dpd mounted one where the host
	// shares it (its own mount namespace, or a shared mount such as a
	// Bidirectional hostPath).
	FoundMounted = "mounted"
	// FoundPrivate: a bpffs only dpd's mount namespace sees, accepted
	// because Options.AllowPrivate said so.
	FoundPrivate = "private"
)

// Fixed inode numbers of the kernel's initial namespaces: the PID one for
// every kernel since 3.8, the mount one since the kernels that fixed it
// (older ones number it dynamically, never with this value).
const (
	initPIDNS = "pid:[4026531836]"
	initMntNS = "mnt:[4026531832]"
)

// Options say what Check accepts.
type Options struct {
	// AllowPrivate accepts, and if need be mounts, a bpffs that only dpd's
	// mount namespace sees: its pins die with that namespace.
	AllowPrivate bool
}

// Report says what Check found, for the start-up log.
type Report struct {
	PinDir  string
	Mount   string // mount point of the bpffs that holds PinDir
	Device  string // its superblock, "major:minor"
	MountID int    // its mount id in /proc/self/mountinfo
	MountNS string // dpd's mount namespace, as /proc/self/ns/mnt names it
	Found   string // one of the Found* values
	Why     string // how Check knows
}

// fix is the remedy every refusal names.
const fix = "run dpd in the host's mount namespace (to enter a network namespace use " +
	"'nsenter --net=/run/netns/NAME dpd ...', not 'ip netns exec', which gives dpd a mount namespace and a /sys of its own), " +
	"or give its container the host's /sys/fs/bpf (Kubernetes: a hostPath volume mounted with mountPropagation: Bidirectional); " +
	"--allow-private-bpffs (DPD_ALLOW_PRIVATE_BPFFS=1) starts anyway, with pins that die with dpd's mount namespace"

// consequence is why a private bpffs is refused.
const consequence = "dpd's pins would die with it, and a dpd started this way takes over the previous dpd's programs without their maps " +
	"and leaves them on an empty jump table when it exits, dropping new connections"

// ErrPrivate is what Check's refusals wrap.
var ErrPrivate = errors.New("private bpffs")

// Check makes sure pinDir is on a bpffs the host shares, mounting one at
// Path when none is there and a mount would be shared. It refuses, with
// an error naming the fix, a bpffs private to dpd's mount namespace, and
// mounting one, unless opts.AllowPrivate.
func Check(pinDir string, opts Options) (Report, error) {
	f, err := gather(pinDir)
	if err != nil {
		return Report{PinDir: pinDir}, err
	}
	p, err := judge(f, opts)
	if err != nil || !p.mount {
		return p.report, err
	}
	return mountChecked(p, opts)
}

// Ensure returns nil when a bpffs is mounted at Path, mounting one if none
// is and the mount would be shared with the host (a private one only with
// opts.AllowPrivate). Mounting needs CAP_SYS_ADMIN.
func Ensure(opts Options) error {
	var st unix.Statfs_t
	if err := unix.Statfs(Path, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	_, err := Check(Path, opts)
	return err
}

// facts is what Check reads from the system; judge decides on them alone.
type facts struct {
	pinDir  string     // absolute, clean
	probe   string     // pinDir or its deepest existing ancestor
	onBPF   bool       // probe is on a bpffs
	dev     string     // probe's superblock, "major:minor"
	mntNS   string     // /proc/self/ns/mnt
	self    mountTable // /proc/self/mountinfo
	init    mountTable // /proc/1/mountinfo when PID 1 is the host's init and readable
	initWhy string     // why init is nil
}

func gather(pinDir string) (facts, error) {
	abs, err := filepath.Abs(pinDir)
	if err != nil {
		return facts{}, fmt.Errorf("pin dir %s: %w", pinDir, err)
	}
	f := facts{pinDir: abs, probe: abs}
	if f.self, err = readMountinfo("/proc/self/mountinfo"); err != nil {
		return f, err
	}
	var st unix.Statfs_t
	for {
		err := unix.Statfs(f.probe, &st)
		if err == nil {
			break
		}
		parent := filepath.Dir(f.probe)
		if !errors.Is(err, unix.ENOENT) || parent == f.probe {
			return f, fmt.Errorf("statfs %s: %w", f.probe, err)
		}
		f.probe = parent
	}
	f.onBPF = st.Type == unix.BPF_FS_MAGIC
	if f.dev, err = devOf(f.probe); err != nil {
		return f, err
	}
	f.mntNS, _ = os.Readlink("/proc/self/ns/mnt") // "" when unreadable: then not known to be initial
	switch pidNS, err := os.Readlink("/proc/self/ns/pid"); {
	case err != nil:
		f.initWhy = fmt.Sprintf("cannot tell whether PID 1 is the host's init: %v", err)
	case pidNS != initPIDNS:
		f.initWhy = "dpd has a PID namespace of its own (a container?), so PID 1 is not the host's init and the host's mounts are out of sight"
	default:
		if f.init, err = readMountinfo("/proc/1/mountinfo"); err != nil {
			f.initWhy = fmt.Sprintf("cannot read the host init's mounts: %v", err)
		}
	}
	return f, nil
}

// plan is judge's decision.
type plan struct {
	report Report
	mount  bool // mount a bpffs at Path
	verify bool // after mounting, PID 1 must see it
}

func judge(f facts, opts Options) (plan, error) {
	p := plan{report: Report{PinDir: f.pinDir, Device: f.dev, MountNS: f.mntNS}}
	selfRoot, ok1 := f.self.root()
	initRoot, ok2 := f.init.root()
	// Mount ids are unique among live mounts, so the same root mount means
	// the same mount namespace.
	sameAsInit := f.init != nil && ok1 && ok2 && selfRoot.ID == initRoot.ID
	hostNS := f.mntNS == initMntNS || sameAsInit
	var notHost string
	switch {
	case f.init != nil:
		notHost = "dpd's mount namespace is not the host init's (PID 1)"
	default:
		notHost = f.initWhy
	}

	if f.onBPF {
		if m, ok := f.self.containing(f.probe); ok {
			p.report.Mount, p.report.MountID = m.Point, m.ID
		}
		switch {
		case hostNS:
			p.report.Found, p.report.Why = FoundHostNamespace, "dpd runs in the host's mount namespace"
		case f.init.hasBPF(f.dev):
			p.report.Found = FoundHost
			p.report.Why = "dpd has a mount namespace of its own, and the host's init (PID 1) has this bpffs mounted too"
		case f.init != nil && opts.AllowPrivate:
			p.report.Found, p.report.Why = FoundPrivate, "the host's init (PID 1) does not have this bpffs mounted; allowed by --allow-private-bpffs"
		case f.init != nil:
			return p, fmt.Errorf("%w: the bpffs holding %s (device %s, mounted at %s) is not one the host's init (PID 1) has mounted (it has %s), so it is private to dpd's mount namespace: %s; %s",
				ErrPrivate, f.pinDir, f.dev, p.report.Mount, devList(f.init.bpfDevs()), consequence, fix)
		default:
			p.report.Found = FoundUnverified
			p.report.Why = f.initWhy + "; taking the bpffs mounted there for the host's"
		}
		return p, nil
	}

	if !under(f.pinDir, Path) {
		return p, fmt.Errorf("--bpf-pin-dir %s is not on a bpffs (%s is %s) and not under %s, where dpd mounts one: mount a bpffs for it ('mount -t bpf bpf DIR')",
			f.pinDir, f.probe, fsName(f.self, f.probe), Path)
	}
	parent, _ := f.self.containing(Path)
	p.mount = true
	switch {
	case hostNS:
		p.report.Found, p.report.Why = FoundMounted, "no bpffs was mounted; dpd mounted one in the host's mount namespace"
	case parent.Shared:
		p.report.Found = FoundMounted
		p.report.Why = "no bpffs was mounted; dpd mounted one on " + parent.Point + ", a shared mount whose mounts propagate to its peers (as with a Bidirectional hostPath)"
		if f.init != nil {
			p.verify = true
			p.report.Why += ", and the host's init (PID 1) sees it"
		} else {
			p.report.Why += "; " + f.initWhy + ", so that it reaches the host is not verified"
		}
	case opts.AllowPrivate:
		p.report.Found, p.report.Why = FoundPrivate, "no bpffs was mounted and "+notHost+"; dpd mounted a private one, allowed by --allow-private-bpffs"
	default:
		p.mount = false
		return p, fmt.Errorf("%w: no bpffs is mounted at %s and %s, so a bpffs dpd mounted there would be private to it: %s; %s",
			ErrPrivate, Path, notHost, consequence, fix)
	}
	return p, nil
}

// mountChecked carries out a plan that mounts, then fills in the report
// from what was mounted.
func mountChecked(p plan, opts Options) (Report, error) {
	r := p.report
	if err := os.MkdirAll(Path, 0o755); err != nil {
		return r, fmt.Errorf("create %s: %w", Path, err)
	}
	if err := unix.Mount("bpf", Path, "bpf", 0, ""); err != nil {
		return r, fmt.Errorf("no bpffs is mounted at %s and mounting one failed (%w): run 'mount -t bpf bpf %s' as root", Path, err, Path)
	}
	dev, err := devOf(Path)
	if err != nil {
		return r, err
	}
	r.Device, r.Mount = dev, Path
	if self, err := readMountinfo("/proc/self/mountinfo"); err == nil {
		if m, ok := self.containing(Path); ok {
			r.MountID = m.ID
		}
	}
	if !p.verify {
		return r, nil
	}
	initTab, err := readMountinfo("/proc/1/mountinfo")
	if err == nil && initTab.hasBPF(dev) {
		return r, nil
	}
	if opts.AllowPrivate {
		r.Found, r.Why = FoundPrivate, "dpd mounted a bpffs on a shared mount the host's init (PID 1) does not see; allowed by --allow-private-bpffs"
		return r, nil
	}
	if uerr := unix.Unmount(Path, unix.MNT_DETACH); uerr != nil {
		return r, fmt.Errorf("unmount the private bpffs dpd mounted at %s: %w", Path, uerr)
	}
	if err == nil {
		err = errors.New("the host's init (PID 1) does not see it")
	}
	r.Found, r.Why = "", ""
	return r, fmt.Errorf("%w: no bpffs was mounted at %s, and the one dpd mounted there (now unmounted again) does not reach the host (%w): %s; %s",
		ErrPrivate, Path, err, consequence, fix)
}

func readMountinfo(path string) (mountTable, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = fh.Close() }()
	t, err := parseMountinfo(fh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

func devOf(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", path, err)
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}

func devList(devs []string) string {
	if len(devs) == 0 {
		return "no bpffs at all"
	}
	return "bpffs devices " + strings.Join(devs, ", ")
}

func fsName(t mountTable, path string) string {
	if m, ok := t.containing(path); ok {
		return m.FSType
	}
	return "not a bpffs"
}
