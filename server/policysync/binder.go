package policysync

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/dpd-dev/dpd/proto/felix"
)

// BinderOptions configure a Binder.
type BinderOptions struct {
	// Dir is the policy-sync directory (Felix's PolicySyncPathPrefix).
	Dir       string
	Processor *Processor
	// ServerOptions build each workload's gRPC server (interceptors).
	ServerOptions []grpc.ServerOption
	// PollInterval is how often creds/ is listed (default 250 ms), as
	// Calico's binder polls.
	PollInterval time.Duration
	Metrics      *Metrics
	Log          *slog.Logger
}

// Binder keeps one socket per credentials file: a file appearing in
// <Dir>/creds opens <Dir>/mount/<uid>/socket, its removal closes the
// socket and every stream on it.
type Binder struct {
	opts BinderOptions
	log  *slog.Logger

	mu     sync.Mutex
	socks  map[string]*workloadSocket // by uid; guarded by mu
	warned map[string]string          // uid -> last problem logged; guarded by mu
}

type workloadSocket struct {
	creds      Credentials
	path       string
	dir        string
	createdDir bool // dpd made mount/<uid>/ and removes it again
	srv        *grpc.Server
	served     chan struct{} // closed when Serve returned
}

// NewBinder creates <Dir>/creds and <Dir>/mount if absent.
func NewBinder(opts BinderOptions) (*Binder, error) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 250 * time.Millisecond
	}
	for _, sub := range []string{CredsSubdir, MountSubdir} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("policy-sync dir: %w", err)
		}
	}
	return &Binder{opts: opts, log: opts.Log, socks: map[string]*workloadSocket{}, warned: map[string]string{}}, nil
}

// Run serves the workload sockets until ctx ends, then closes them all.
func (b *Binder) Run(ctx context.Context) error {
	b.log.Info("policy-sync serving", "dir", b.opts.Dir)
	t := time.NewTicker(b.opts.PollInterval)
	defer t.Stop()
	for {
		b.Scan()
		select {
		case <-ctx.Done():
			b.closeAll()
			return nil
		case <-t.C:
		}
	}
}

// Scan opens sockets for new credentials files and closes those whose file
// is gone. Run calls it every PollInterval.
func (b *Binder) Scan() {
	credsDir := filepath.Join(b.opts.Dir, CredsSubdir)
	entries, err := os.ReadDir(credsDir)
	if err != nil {
		b.warnOnce("", fmt.Sprintf("list %s: %v", credsDir, err))
		return
	}
	present := map[string]bool{}
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), CredsExt)
		if !ok || e.IsDir() || uid == "" || uid == "." || uid == ".." {
			continue
		}
		present[uid] = true
		b.mu.Lock()
		_, known := b.socks[uid]
		b.mu.Unlock()
		if !known {
			if err := b.add(uid); err != nil {
				b.warnOnce(uid, err.Error())
			}
		}
	}
	b.mu.Lock()
	var gone []string
	for uid := range b.socks {
		if !present[uid] {
			gone = append(gone, uid)
		}
	}
	b.mu.Unlock()
	for _, uid := range gone {
		b.remove(uid)
	}
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

func (b *Binder) warnOnce(uid, problem string) {
	b.mu.Lock()
	seen := b.warned[uid] == problem
	b.warned[uid] = problem
	b.mu.Unlock()
	if !seen {
		b.log.Warn("policy-sync credentials not served", "uid", uid, "problem", problem)
	}
}

// add reads uid's credentials and serves its socket.
func (b *Binder) add(uid string) error {
	creds, err := ReadCredentials(filepath.Join(b.opts.Dir, CredsSubdir, uid+CredsExt), uid)
	if err != nil {
		return err
	}
	ws := &workloadSocket{creds: creds, dir: filepath.Join(b.opts.Dir, MountSubdir, uid), served: make(chan struct{})}
	ws.path = filepath.Join(ws.dir, SocketFilename)
	if _, err := os.Stat(ws.dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(ws.dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", ws.dir, err)
		}
		ws.createdDir = true
	}
	// A socket left by an earlier dpd (or a crash) is replaced, as Calico's
	// binder does: the credentials file says this workload exists now.
	if err := os.Remove(ws.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove old socket %s: %w", ws.path, err)
	}
	lis, err := net.Listen("unix", ws.path)
	if err != nil {
		return fmt.Errorf("listen %s: %w", ws.path, err)
	}
	// The workload's processes run as any user; only they see this mount.
	if err := os.Chmod(ws.path, 0o666); err != nil {
		lis.Close()
		return fmt.Errorf("chmod %s: %w", ws.path, err)
	}
	ws.srv = grpc.NewServer(b.opts.ServerOptions...)
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
	b.mu.Unlock()
	b.opts.Metrics.workloadAdded(1)
	b.log.Info("policy-sync socket open", "uid", uid, "workload", creds.WorkloadID().String(), "socket", ws.path)
	return nil
}

// remove closes uid's socket and every stream on it.
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
	if err := os.Remove(ws.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		b.log.Warn("remove policy-sync socket", "socket", ws.path, "err", err)
	}
	if ws.createdDir {
		_ = os.Remove(ws.dir) // only if empty: the workload may have put things there
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
