package hostile_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/dpd-dev/dpd/internal/testutil"
)

var (
	buildOnce sync.Once
	dpdBin    string
	buildErr  error
)

// dpdBinary builds cmd/dpd once per test binary (or takes
// DPD_HOSTILE_BINARY).
func dpdBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if bin := os.Getenv("DPD_HOSTILE_BINARY"); bin != "" {
			dpdBin = bin
			return
		}
		dir, err := os.MkdirTemp("", "dpd-hostile-bin-")
		if err != nil {
			buildErr = err
			return
		}
		dpdBin = filepath.Join(dir, "dpd")
		cmd := exec.Command("go", "build", "-o", dpdBin, "./cmd/dpd")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/dpd: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return dpdBin
}

// TestMain removes the binary it built.
func TestMain(m *testing.M) {
	code := m.Run()
	if dpdBin != "" && os.Getenv("DPD_HOSTILE_BINARY") == "" {
		_ = os.RemoveAll(filepath.Dir(dpdBin))
	}
	os.Exit(code)
}

// daemon is one dpd process with --dataplane=memory.
type daemon struct {
	cmd     *exec.Cmd
	dir     string // its private directory: socket, policy-sync dir
	socket  string
	metrics string // host:port of /metrics
	log     *logTail
	done    chan struct{}
	waitErr error
}

// logTail counts the daemon's log lines and keeps the first 64 KiB.
type logTail struct {
	mu    sync.Mutex
	lines int
	head  bytes.Buffer
	addr  chan string
}

var metricsAddrRE = regexp.MustCompile(`msg="metrics serving" addr=(\S+)`)

func (l *logTail) consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		l.mu.Lock()
		l.lines++
		if l.head.Len() < 64<<10 {
			l.head.WriteString(line + "\n")
		}
		l.mu.Unlock()
		if m := metricsAddrRE.FindStringSubmatch(line); m != nil {
			select {
			case l.addr <- m[1]:
			default:
			}
		}
	}
}

func (l *logTail) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines
}

func (l *logTail) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.head.String()
}

// startDaemon runs dpd with args added to a private socket and metrics
// port; extra files become fds 3, 4, ... It waits for /readyz and stops
// the daemon (SIGTERM) at cleanup, printing its log if the test failed.
func startDaemon(t *testing.T, extra []*os.File, args ...string) *daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "dpdh") // short: socket paths are bounded
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	d := &daemon{dir: dir, socket: filepath.Join(dir, "dpd.sock"), log: &logTail{addr: make(chan string, 1)}, done: make(chan struct{})}
	args = append([]string{"--dataplane=memory", "--socket=" + d.socket, "--metrics-addr=127.0.0.1:0"}, args...)
	d.cmd = exec.Command(dpdBinary(t), args...)
	d.cmd.ExtraFiles = extra
	d.cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logged := make(chan struct{})
	go func() { d.log.consume(stderr); close(logged) }()
	go func() { <-logged; d.waitErr = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		d.stop(t)
		if t.Failed() {
			t.Logf("dpd log (%d lines, first 64 KiB):\n%s", d.log.count(), d.log.text())
		}
	})
	select {
	case d.metrics = <-d.log.addr:
	case <-d.done:
		t.Fatalf("dpd exited at start: %v", d.waitErr)
	case <-time.After(30 * time.Second):
		t.Fatal("dpd did not report its metrics address")
	}
	testutil.WaitFor(t, 30*time.Second, "dpd ready", func() bool {
		code, _ := d.get("/readyz")
		return code == http.StatusOK
	})
	return d
}

// stop sends SIGTERM and waits for the exit (SIGKILL after 10 s).
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		t.Error("dpd did not stop on SIGTERM within 10 s")
	}
}

func (d *daemon) get(path string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + d.metrics + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// answers fails t unless dpd serves gRPC health on its socket and
// /metrics, each within 2 s.
func (d *daemon) answers(t *testing.T) {
	t.Helper()
	if code, body := d.get("/metrics"); code != http.StatusOK {
		t.Fatalf("/metrics: %d %.200s", code, body)
	}
	conn, err := grpc.NewClient("unix://"+d.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health on %s: %v %v", d.socket, resp, err)
	}
}

// metric is the sum of the samples of name whose labels contain every
// label given ("reason=\"limit\""); -1 if /metrics did not answer.
func (d *daemon) metric(name string, labels ...string) float64 {
	code, body := d.get("/metrics")
	if code != http.StatusOK {
		return -1
	}
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// cpuTicks is the daemon's user+system CPU time in clock ticks.
func (d *daemon) cpuTicks(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name (which may hold spaces): state is
	// field 3, utime 14, stime 15.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return utime + stime
}

// rssBytes is the daemon's VmRSS.
func (d *daemon) rssBytes(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// openFDs counts the daemon's open descriptors.
func (d *daemon) openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// rssBound is the most resident memory any case may leave dpd with
// (memory dataplane, Go soft limit 44 MiB by default; the
// project's budget is 64 MiB of RSS).
const rssBound = 64 << 20

func (d *daemon) checkRSS(t *testing.T) {
	t.Helper()
	if rss := d.rssBytes(t); rss > rssBound {
		t.Errorf("VmRSS %d MiB, bound %d MiB", rss>>20, rssBound>>20)
	} else {
		t.Logf("VmRSS %d MiB (bound %d MiB)", rss>>20, rssBound>>20)
	}
}
