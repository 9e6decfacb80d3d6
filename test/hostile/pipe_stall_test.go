package hostile_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixpipe"
)

// pipeFlaps is the most endpoints the stalled-Felix test brings up and
// removes: past the default cap of unread statuses (16,384 beyond one per
// live endpoint), well short of what a build without the cap would need
// to show its memory growing.
const pipeFlaps = 40000

// startPipeDaemon runs dpd in pipe mode and returns fd 3's writer and fd
// 4's reader; the caller decides whether statuses are read.
func startPipeDaemon(t *testing.T) (*daemon, *os.File, *os.File) {
	t.Helper()
	inR, inW, err := os.Pipe() // fd 3: to dpd
	must(t, err)
	outR, outW, err := os.Pipe() // fd 4: from dpd
	must(t, err)
	t.Cleanup(func() { inW.Close(); outR.Close() })
	d := startDaemon(t, []*os.File{inR, outW}, "--felix-pipe")
	inR.Close()
	outW.Close()
	return d, inW, outR
}

// waitExit waits for the daemon to exit by itself and returns its error.
func (d *daemon) waitExit(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-d.done:
		return d.waitErr
	case <-time.After(within):
		t.Fatalf("dpd still running after %v", within)
		return nil
	}
}

// TestPipeFelixStopsReading: a Felix that never reads fd 4 while endpoints
// come and go makes dpd end the session once its unread statuses pass the
// cap: it logs why and exits non-zero (Felix restarts its driver and
// resyncs), with its memory bounded up to the end.
func TestPipeFelixStopsReading(t *testing.T) {
	d, inW, _ := startPipeDaemon(t)
	w := felixpipe.NewWriter(inW)
	must(t, w.Write(testutil.ToDataplane(&felix.InSync{})))
	sent := make(chan int, 1)
	go func() { // ends when dpd stops reading fd 3 (it exited)
		n := 0
		for ; n < pipeFlaps; n++ {
			name := fmt.Sprintf("p%d", n)
			if w.Write(wepUpdate(name, "calp"+fmt.Sprint(n), n)) != nil || w.Write(wepRemove(name)) != nil {
				break
			}
		}
		sent <- n
	}()
	peak := 0
	testutil.WaitFor(t, 120*time.Second, "dpd to end the stalled session", func() bool {
		select {
		case <-d.done:
			return true
		default:
		}
		if hwm, err := d.statusField("VmHWM"); err == nil && hwm > peak {
			peak = hwm
		}
		return false
	})
	err := d.waitExit(t, time.Second)
	inW.Close()
	n := <-sent
	t.Logf("%d endpoints came and went unread; VmHWM %d MiB (bound %d MiB) before the exit: %v", n, peak>>20, flapRSSBound>>20, err)
	if err == nil {
		t.Fatal("dpd exited cleanly; want a non-zero exit so that Felix restarts it")
	}
	if n >= pipeFlaps {
		t.Errorf("dpd took all %d flapping endpoints before it ended the session", n)
	}
	if !strings.Contains(d.log.text(), "ending the felix pipe session") || !strings.Contains(d.log.text(), "unread") {
		t.Errorf("the log does not say why the session ended")
	}
	if peak > flapRSSBound {
		t.Errorf("VmHWM %d MiB, bound %d MiB", peak>>20, flapRSSBound>>20)
	}
	d.checkLogLines(t, flapLogBound)
}

// TestPipeMalformedFrame: a frame that does not decode and names no
// endpoint is logged with its message number and makes dpd exit non-zero,
// so that Felix restarts it and resends its state; an endpoint applied
// before is still listed up to the end.
func TestPipeMalformedFrame(t *testing.T) {
	d, inW, outR := startPipeDaemon(t)
	go func() { // statuses: read and dropped
		r := felixpipe.NewReader(outR, 0)
		for r.Read(&felix.FromDataplane{}) == nil {
		}
	}()
	w := felixpipe.NewWriter(inW)
	for _, m := range []*felix.ToDataplane{wepUpdate("web", "caliweb", 0), inSync()} {
		must(t, w.Write(m))
	}
	testutil.WaitFor(t, 30*time.Second, "web up", func() bool { return listEndpoints(t, d)["ns/web"].status == "up" })
	frame := []byte{8, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	if _, err := inW.Write(frame); err != nil {
		t.Fatal(err)
	}
	err := d.waitExit(t, 30*time.Second)
	if err == nil {
		t.Fatal("dpd exited cleanly after an undecodable frame; want a non-zero exit")
	}
	log := d.log.text()
	if !strings.Contains(log, "undecodable") || !strings.Contains(log, "message=3") {
		t.Errorf("the log does not name the undecodable third message:\n%s", log)
	}
	d.checkLogLines(t, 30)
}
