package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/client/ctl"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixpipe"
	"github.com/dpd-dev/dpd/server/servertest"
)

// TestFelixPipe runs the dpd binary as Felix runs its dataplane driver:
// no arguments, DPD_FELIX_PIPE=1 in the environment, ToDataplane frames on
// fd 3 and FromDataplane frames read back from fd 4. A snapshot and InSync
// bring every endpoint up and DataplaneInSync back (sent because
// DPD_FELIX_PIPE_EXTENSIONS asks for it; Felix's reader has no case for it,
// so it is off by default); closing fd 3 stops dpd with exit status 0.
func TestFelixPipe(t *testing.T) {
	dpd := filepath.Join(t.TempDir(), "dpd")
	goBuild(t, dpd, ".")
	msgs, err := ctl.LoadScenario("../../examples/basic.yaml")
	if err != nil {
		t.Fatal(err)
	}

	toDPD, feed, err := os.Pipe() // dpd reads toDPD as fd 3
	if err != nil {
		t.Fatal(err)
	}
	fromDPD, statusW, err := os.Pipe() // dpd writes statusW as fd 4
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd := exec.Command(dpd)
	cmd.Env = append(os.Environ(), "DPD_FELIX_PIPE=1", "DPD_FELIX_PIPE_EXTENSIONS=1", "DPD_DATAPLANE=memory",
		"DPD_SOCKET="+servertest.SocketPath(t), "DPD_METRICS_ADDR=127.0.0.1:0")
	cmd.ExtraFiles = []*os.File{toDPD, statusW}
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Only dpd holds these ends now: its exit closes fd 4 for the reader.
	toDPD.Close()
	statusW.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		feed.Close()
		fromDPD.Close()
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	w := felixpipe.NewWriter(feed)
	for _, m := range append(msgs, &felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}}) {
		if err := w.Write(m); err != nil {
			t.Fatalf("write frame: %v\n%s", err, stderr.String())
		}
	}

	frames := make(chan *felix.FromDataplane)
	readErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		r := felixpipe.NewReader(fromDPD, 0)
		for {
			m := &felix.FromDataplane{}
			if err := r.Read(m); err != nil {
				readErr <- err
				return
			}
			select {
			case frames <- m:
			case <-done:
				return
			}
		}
	}()
	up := map[string]bool{}
	inSync := false
	hang := time.After(30 * time.Second) // hang guard, not a timing assertion
	for len(up) < 3 || !inSync {
		select {
		case m := <-frames:
			if u := m.GetWorkloadEndpointStatusUpdate(); u.GetStatus().GetStatus() == "up" {
				up[u.GetId().GetWorkloadId()] = true
			}
			inSync = inSync || m.GetDataplaneInSync() != nil
		case err := <-readErr:
			t.Fatalf("fd 4 ended (%v) with %d up, in sync %t\n%s", err, len(up), inSync, stderr.String())
		case <-hang:
			t.Fatalf("%d endpoints up, in sync %t\n%s", len(up), inSync, stderr.String())
		}
	}

	// Felix closing its end of fd 3 is a clean stop.
	feed.Close()
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("dpd exited with %v after fd 3 closed, want 0\n%s", err, stderr.String())
		}
	case <-time.After(15 * time.Second): // hang guard
		t.Fatalf("dpd did not exit after fd 3 closed\n%s", stderr.String())
	}
}
