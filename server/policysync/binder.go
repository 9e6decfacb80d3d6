package policysync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	"golang.org/x/sys/unix"

	"google.golang.org/grpc"

	"github.com/dpd-dev/dpd/internal/ratelog"
	"github.com/dpd-dev/dpd/proto/felix"
)

// BinderOptions configure a Binder.
type BinderOptions struct {
	// Dir is the policy-sync directory (Felix's PolicySyncPathPrefix).
	Dir       string
	Processor *Processor
	// ServerOptions build each workload's gRPC server (interceptors).
	ServerOptions []grpc.ServerOption
	// PollInterval is how often creds/ is listed where inotify is not
	// available (default 250 ms, as Calico's binder polls).
	PollInterval time.Duration
	// ResyncInterval is how often creds/ is listed anyway when inotify
	// wakes the binder (default 10 s): it repairs a lost event.
	ResyncInterval time.Duration
	// MaxWorkloads caps the workloads served (DefaultMaxWorkloads); the
	// credentials files past it are refused until others go.
	MaxWorkloads int
	// ConnsPerWorkload bounds concurrent connections on one workload's
	// socket (DefaultConnsPerWorkload).
	ConnsPerWorkload int
	// HandshakeTimeout bounds a workload client's HTTP/2 handshake
	// (default 5 s): a client sends its preface at once, and a silent one
	// must give its connection slot back soon.
	HandshakeTimeout time.Duration
	// FDReserve is how many descriptors below RLIMIT_NOFILE policy sync
	// leaves to the rest of the daemon (DefaultFDReserve).
	FDReserve int
	Metrics   *Metrics
	Log       *slog.Logger
}

// Binder keeps one socket per credentials file: a file appearing in
// <Dir>/creds opens <Dir>/mount/<uid>/socket, its removal closes the
// socket and every stream on it.
type Binder struct {
	opts BinderOptions
	log  *slog.Logger

	budget *fdBudget
	// root is the policy-sync directory (O_PATH): everything below it is
	// opened from it without following links.
	root int
	// creds is the creds/ directory, held open so it can be listed even
	// when every descriptor is taken (and files removed then noticed).
	creds *os.File
	watch *watcher // nil: polling
	// stamps are the versions of files refused for what they hold: they
	// are not read again until they change. Only Scan uses it.
	stamps map[string]stamp

	mu      sync.Mutex
	socks   map[string]*workloadSocket // by uid; guarded by mu
	warned  map[string]string          // uid -> last problem logged; guarded by mu
	refused map[string]string          // uid -> why it is not served now; guarded by mu
}

type workloadSocket struct {
	creds      Credentials
	path       string // for humans: dpd never uses it
	ino        uint64 // the socket's inode: only it is removed
	createdDir bool   // dpd made mount/<uid>/ and removes it again
	srv        *grpc.Server
	served     chan struct{} // closed when Serve returned
}

// NewBinder creates <Dir>/creds and <Dir>/mount if absent. Dir itself is
// the operator's and may be reached through links; nothing below it is.
func NewBinder(opts BinderOptions) (*Binder, error) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	// A node full of bad or excess credentials files logs a few lines per
	// kind of problem and interval, not one per file; the metrics count
	// every file.
	opts.Log = ratelog.Wrap(opts.Log, ratelog.Options{})
	if opts.PollInterval <= 0 {
		opts.PollInterval = 250 * time.Millisecond
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 5 * time.Second
	}
	if opts.ResyncInterval <= 0 {
		opts.ResyncInterval = 10 * time.Second
	}
	if opts.MaxWorkloads <= 0 {
		opts.MaxWorkloads = DefaultMaxWorkloads
	}
	if opts.ConnsPerWorkload <= 0 {
		opts.ConnsPerWorkload = DefaultConnsPerWorkload
	}
	if opts.FDReserve <= 0 {
		opts.FDReserve = DefaultFDReserve
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("policy-sync dir: %w", err)
	}
	root, err := unix.Open(opts.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("policy-sync dir: open %s: %w", opts.Dir, err)
	}
	for _, sub := range []string{CredsSubdir, MountSubdir} {
		if err := unix.Mkdirat(root, sub, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			closeFD(root)
			return nil, fmt.Errorf("policy-sync dir: create %s: %w", sub, err)
		}
	}
	b := &Binder{opts: opts, log: opts.Log, budget: newFDBudget(opts.ConnsPerWorkload, opts.FDReserve), root: root,
		socks: map[string]*workloadSocket{}, warned: map[string]string{}, refused: map[string]string{}, stamps: map[string]stamp{}}
	if err := b.openCreds(); err != nil {
		closeFD(root)
		return nil, fmt.Errorf("policy-sync dir: %w", err)
	}
	if fd, err := openBeneath(root, MountSubdir, unix.O_PATH|unix.O_DIRECTORY); err != nil {
		b.close()
		return nil, fmt.Errorf("policy-sync dir: %w", err)
	} else {
		closeFD(fd)
	}
	opts.Metrics.setLimit(opts.MaxWorkloads)
	return b, nil
}

// openCreds (re)opens creds/, refusing a link.
func (b *Binder) openCreds() error {
	fd, err := openBeneath(b.root, CredsSubdir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	if b.watch != nil {
		if err := b.watch.watch(fd); err != nil {
			closeFD(fd)
			return err
		}
	}
	if b.creds != nil {
		b.creds.Close()
	}
	b.creds = os.NewFile(uintptr(fd), filepath.Join(b.opts.Dir, CredsSubdir))
	return nil
}

// credsReplaced reports whether creds/ is no longer the directory held.
func (b *Binder) credsReplaced() bool {
	var held unix.Stat_t
	if err := unix.Fstat(int(b.creds.Fd()), &held); err != nil {
		return true
	}
	st, ok, err := statAt(b.root, CredsSubdir)
	return err == nil && (!ok || st.Dev != held.Dev || st.Ino != held.Ino)
}

func (b *Binder) close() {
	if b.watch != nil {
		b.watch.close()
	}
	if b.creds != nil {
		b.creds.Close()
	}
	closeFD(b.root)
}

// minScanGap spaces scans woken by events: a peer that keeps touching
// creds/ costs at most one listing per gap.
const minScanGap = 50 * time.Millisecond

// Run serves the workload sockets until ctx ends, then closes them all.
// creds/ is scanned when inotify reports a change (and every
// ResyncInterval), or every PollInterval without inotify.
func (b *Binder) Run(ctx context.Context) error {
	interval := b.opts.PollInterval
	if w, err := newWatcher(int(b.creds.Fd())); err != nil {
		b.log.Info("policy-sync polls creds/: no inotify", "err", err, "interval", interval)
	} else {
		b.mu.Lock()
		b.watch, interval = w, b.opts.ResyncInterval
		b.mu.Unlock()
	}
	var wake <-chan struct{}
	if b.watch != nil {
		wake = b.watch.wake
	}
	b.log.Info("policy-sync serving", "dir", b.opts.Dir, "max_workloads", b.opts.MaxWorkloads,
		"conns_per_workload", b.opts.ConnsPerWorkload, "nofile", b.budget.limit(), "fd_reserve", b.opts.FDReserve,
		"inotify", b.watch != nil)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		b.Scan()
		last := time.Now()
		select {
		case <-ctx.Done():
			b.closeAll()
			b.close()
			return nil
		case <-t.C:
		case <-wake:
			if gap := minScanGap - time.Since(last); gap > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(gap):
				}
			}
		}
	}
}

// Scan opens sockets for new credentials files and closes those whose file
// is gone, removals first so their descriptors serve the newcomers. Run
// calls it every PollInterval.
func (b *Binder) Scan() {
	present, err := b.listCreds()
	if err != nil {
		b.warnOnce("", "list", err.Error())
		return
	}
	b.mu.Lock()
	var gone, fresh []string
	for uid := range b.socks {
		if !present[uid] {
			gone = append(gone, uid)
		}
	}
	for uid := range present {
		if _, ok := b.socks[uid]; !ok {
			fresh = append(fresh, uid)
		}
	}
	for uid := range b.stamps {
		if !present[uid] {
			delete(b.stamps, uid)
		}
	}
	for uid := range b.refused {
		if !present[uid] {
			b.opts.Metrics.refusedNow(b.refused[uid], -1)
			delete(b.refused, uid)
			delete(b.warned, uid)
		}
	}
	b.mu.Unlock()
	for _, uid := range gone {
		b.remove(uid)
	}
	if len(fresh) == 0 {
		return
	}
	sort.Strings(fresh) // the same files win on every scan
	b.mu.Lock()
	served := len(b.socks)
	b.mu.Unlock()
	room := b.budget.room(served)
	credsFD := int(b.creds.Fd())
	for _, uid := range fresh {
		if old, refused := b.stamps[uid]; refused {
			if st, ok, err := statAt(credsFD, uid+CredsExt); err == nil && ok && old == stampOf(&st) {
				continue // refused for what it holds, and unchanged: not read again
			}
			delete(b.stamps, uid)
		}
		switch {
		case served >= b.opts.MaxWorkloads:
			b.refuse(uid, reasonLimit, fmt.Sprintf("already serving %d workloads, the most --policysync-max-workloads allows", b.opts.MaxWorkloads), false)
			continue
		case room <= 0:
			b.refuse(uid, reasonDescriptors, fmt.Sprintf("no descriptors left: %d kept free below RLIMIT_NOFILE %d", b.opts.FDReserve, b.budget.limit()), false)
			continue
		}
		// The stamp is taken before the read: a change after it makes the
		// next scan read the file again.
		st, ok, err := statAt(credsFD, uid+CredsExt)
		if err != nil || !ok {
			continue // gone since the listing
		}
		if err := b.add(uid); err != nil {
			reason := reasonOfAdd(err)
			if reason != reasonListen { // the file is the problem: wait for it to change
				b.stamps[uid] = stampOf(&st)
			}
			b.refuse(uid, reason, err.Error(), reason != reasonListen)
			continue
		}
		served++
		room--
	}
}

// listCreds reads the names of creds/ through the descriptor held open.
func (b *Binder) listCreds() (map[string]bool, error) {
	if b.credsReplaced() {
		if err := b.openCreds(); err != nil {
			// Listing the old one (deleted: empty) closes every socket.
			b.warnOnce("", reasonLink, err.Error())
		}
	}
	if _, err := b.creds.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("list %s: %w", b.creds.Name(), err)
	}
	entries, err := b.creds.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", b.creds.Name(), err)
	}
	present := map[string]bool{}
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), CredsExt)
		if !ok || e.IsDir() || uid == "" || uid == "." || uid == ".." || strings.ContainsFunc(uid, badNameRune) {
			continue
		}
		present[uid] = true
	}
	return present, nil
}

// Why a credentials file is not served (the reason label of
// dpd_policysync_refused_total).
const (
	reasonLimit       = "limit"
	reasonDescriptors = "descriptors"
	reasonInvalid     = "invalid"
	reasonLink        = "link"
	reasonListen      = "listen"
)

// reasonOfAdd classes an add error.
func reasonOfAdd(err error) string {
	switch {
	case errors.Is(err, errLink):
		return reasonLink
	case errors.Is(err, errSocket):
		return reasonListen
	}
	return reasonInvalid
}

// badNameRune: a uid names a directory dpd creates and appears in logs.
func badNameRune(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }

// refuse records that uid is not served, counting it once per reason, or
// again if changed (the file changed since it was last refused).
func (b *Binder) refuse(uid, reason, problem string, changed bool) {
	b.mu.Lock()
	prev, was := b.refused[uid]
	b.refused[uid] = reason
	b.mu.Unlock()
	if !was || prev != reason || changed {
		if was {
			b.opts.Metrics.refusedNow(prev, -1)
		}
		b.opts.Metrics.refusedNow(reason, 1)
		b.opts.Metrics.refusal(reason)
	}
	b.warnOnce(uid, reason, problem)
}

// watching reports whether inotify wakes the binder.
func (b *Binder) watching() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.watch != nil
}

// Refused lists the credentials files not served, by uid, with the reason.
func (b *Binder) Refused() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]string, len(b.refused))
	for uid, r := range b.refused {
		out[uid] = r
	}
	return out
}

// Sockets lists the socket paths being served, by uid.
func (b *Binder) Sockets() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]string, len(b.socks))
	for uid, s := range b.socks {
		out[uid] = s.path
	}
	return out
}

// warnOnce logs uid's problem unless it was the last one logged for uid;
// kind files it with the rate limiter.
func (b *Binder) warnOnce(uid, kind, problem string) {
	b.mu.Lock()
	seen := b.warned[uid] == problem
	b.warned[uid] = problem
	b.mu.Unlock()
	if !seen {
		b.log.Warn("policy-sync credentials not served", ratelog.Key(kind), "uid", uid, "reason", kind, "problem", problem)
	}
}

// add reads uid's credentials and serves its socket.
func (b *Binder) add(uid string) error {
	creds, err := readCredentialsAt(int(b.creds.Fd()), uid)
	if err != nil {
		return err
	}
	ws := &workloadSocket{creds: creds, path: filepath.Join(b.opts.Dir, MountSubdir, uid, SocketFilename), served: make(chan struct{})}
	dirfd, created, err := workloadDir(b.root, uid)
	if err != nil {
		return err
	}
	ws.createdDir = created
	lis, ino, err := listenIn(dirfd)
	closeFD(dirfd)
	if err != nil {
		if created { // leave nothing behind
			removeWorkloadDir(b.root, uid)
		}
		return fmt.Errorf("%s/%s: %w", MountSubdir, uid, err)
	}
	ws.ino = ino
	lis = newLimitListener(lis, b.opts.ConnsPerWorkload, b.budget)
	ws.srv = grpc.NewServer(append(slices.Clip(b.opts.ServerOptions), grpc.ConnectionTimeout(b.opts.HandshakeTimeout))...)
	felix.RegisterPolicySyncServer(ws.srv, &service{proc: b.opts.Processor, creds: creds, met: b.opts.Metrics,
		log: b.log.With("uid", uid)})
	go func() {
		defer close(ws.served)
		if err := ws.srv.Serve(lis); err != nil {
			b.log.Warn("policy-sync socket stopped", "socket", ws.path, "err", err)
		}
	}()
	b.mu.Lock()
	b.socks[uid] = ws
	delete(b.warned, uid)
	if r, ok := b.refused[uid]; ok {
		b.opts.Metrics.refusedNow(r, -1)
		delete(b.refused, uid)
	}
	b.mu.Unlock()
	b.opts.Metrics.workloadAdded(1)
	b.log.Info("policy-sync socket open", "uid", uid, "workload", creds.WorkloadID().String(), "socket", ws.path)
	return nil
}

// remove closes uid's socket and every stream on it, and deletes the
// socket (only if it is still the one dpd bound) and mount/<uid>/ (only if
// dpd created it and it is empty).
func (b *Binder) remove(uid string) {
	b.mu.Lock()
	ws := b.socks[uid]
	delete(b.socks, uid)
	delete(b.warned, uid)
	b.mu.Unlock()
	if ws == nil {
		return
	}
	ws.srv.Stop()
	<-ws.served
	if dirfd, err := openBeneath(b.root, MountSubdir+"/"+uid, unix.O_PATH|unix.O_DIRECTORY); err != nil {
		if !errors.Is(err, unix.ENOENT) {
			b.log.Warn("policy-sync socket left in place", ratelog.Key("remove"), "uid", uid, "err", err)
		}
	} else {
		removeSocketIn(dirfd, ws.ino)
		closeFD(dirfd)
		if ws.createdDir {
			removeWorkloadDir(b.root, uid)
		}
	}
	b.opts.Metrics.workloadAdded(-1)
	b.log.Info("policy-sync socket closed", "uid", uid, "workload", ws.creds.WorkloadID().String())
}

func (b *Binder) closeAll() {
	b.mu.Lock()
	uids := make([]string, 0, len(b.socks))
	for uid := range b.socks {
		uids = append(uids, uid)
	}
	b.mu.Unlock()
	for _, uid := range uids {
		b.remove(uid)
	}
}
