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
// bring every endpoint up; closing fd 3 stops dpd with exit status 0. By
// default fd 4 carries only what Felix's reader handles: no
// DataplaneInSync and no happy-endpoints report (Felix logs each as an
// unknown message); DPD_FELIX_PIPE_EXTENSIONS=1 asks for both.
func TestFelixPipe(t *testing.T) {
	dpd := filepath.Join(t.TempDir(), "dpd")
	goBuild(t, dpd, ".")
	t.Run("default", func(t *testing.T) { runFelixPipe(t, dpd, false) })
	t.Run("extensions", func(t *testing.T) { runFelixPipe(t, dpd, true) })
}

func runFelixPipe(t *testing.T, dpd string, extensions bool) {
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
	cmd.Env = append(os.Environ(), "DPD_FELIX_PIPE=1", "DPD_DATAPLANE=memory",
		"DPD_SOCKET="+servertest.SocketPath(t), "DPD_METRICS_ADDR=127.0.0.1:0")
	if extensions {
		cmd.Env = append(cmd.Env, "DPD_FELIX_PIPE_EXTENSIONS=1")
	}
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
	inSync, happy := 0, 0
	note := func(m *felix.FromDataplane) {
		if u := m.GetWorkloadEndpointStatusUpdate(); u.GetStatus().GetStatus() == "up" {
			up[u.GetId().GetWorkloadId()] = true
		}
		if m.GetDataplaneInSync() != nil {
			inSync++
		}
		if m.GetHappyEndpoints() != nil {
			happy++
		}
	}
	hang := time.After(30 * time.Second) // hang guard, not a timing assertion
	for len(up) < 3 || (extensions && inSync == 0) {
		select {
		case m := <-frames:
			note(m)
		case err := <-readErr:
			t.Fatalf("fd 4 ended (%v) with %d up, in sync %d\n%s", err, len(up), inSync, stderr.String())
		case <-hang:
			t.Fatalf("%d endpoints up, in sync %d\n%s", len(up), inSync, stderr.String())
		}
	}

	// Felix closing its end of fd 3 is a clean stop; fd 4 is read to its
	// end, so every frame dpd sent is counted.
	feed.Close()
	for eof := false; !eof; {
		select {
		case m := <-frames:
			note(m)
		case <-readErr:
			eof = true
		case <-time.After(15 * time.Second): // hang guard
			t.Fatalf("fd 4 not closed after fd 3 closed\n%s", stderr.String())
		}
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("dpd exited with %v after fd 3 closed, want 0\n%s", err, stderr.String())
		}
	case <-time.After(15 * time.Second): // hang guard
		t.Fatalf("dpd did not exit after fd 3 closed\n%s", stderr.String())
	}
	t.Logf("extensions %t: %d DataplaneInSync, %d happy-endpoints reports on fd 4", extensions, inSync, happy)
	if !extensions && inSync+happy > 0 {
		t.Errorf("fd 4 carried %d DataplaneInSync and %d happy-endpoints reports; Felix's reader handles neither", inSync, happy)
	}
}
