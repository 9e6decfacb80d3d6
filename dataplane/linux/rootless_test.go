package linux

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// programmerTests are the per-concern programmer tests over fake kernel
// facilities: they must pass for a normal user, so that the logic of
// attach, verify, GC, routes and services is testable without root.
var programmerTests = []string{
	"TestEndpointStateMachineGolden", "TestEndpointsAnyOrder", "TestCollectGarbageGolden",
	"TestCollectGarbageReadErrorsRemoveNothing", "TestRoutesAndTunnelsGolden", "TestRoutesAndTunnelsAnyOrder",
	"TestServicesGolden", "TestDirectReloadGolden", "TestAttachAndDetachCounts",
	"TestHostEndpointApplyRemove", "TestPolicyGroupChangeWritesOneSlot",
}

// TestProgrammerTestsRunWithoutRoot runs the programmer tests again as
// user nobody, with CI=true so that a test that wants root fails instead
// of skipping. As a normal user this very run already proves it.
func TestProgrammerTestsRunWithoutRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Log("running as a normal user: the programmer tests of this run prove it")
		return
	}
	// The test binary sits in a directory only root may enter: copy it to
	// one nobody can read.
	dir, err := os.MkdirTemp("", "dpd-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "linux.test")
	copyExecutable(t, os.Args[0], bin)
	cmd := exec.Command(bin, "-test.count=1", "-test.v", "-test.run", "^("+strings.Join(programmerTests, "|")+")$")
	cmd.Env = []string{"CI=true", "HOME=" + dir, "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("programmer tests as user nobody: %v\n%s", err, out)
	}
	for _, name := range programmerTests {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass as user nobody", name)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.Close() }()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
