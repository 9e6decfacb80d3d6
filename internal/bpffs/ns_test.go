package bpffs_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/internal/bpffs"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// helperEnv makes the test binary a helper: it runs Check in whatever
// mount namespace it was started in, prints the outcome and exits.
const helperEnv = "DPD_BPFFS_CHECK_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(checkHelper(mode == "allow"))
	}
	os.Exit(m.Run())
}

func checkHelper(allow bool) int {
	r, err := bpffs.Check(bpffs.Path+"/dpd-ns-test", bpffs.Options{AllowPrivate: allow})
	var st unix.Statfs_t
	mounted := unix.Statfs(bpffs.Path, &st) == nil && st.Type == unix.BPF_FS_MAGIC
	fmt.Printf("found=%s private=%v mounted=%v err=%v\n", r.Found, errors.Is(err, bpffs.ErrPrivate), mounted, err)
	return 0
}

// TestCheckInMountNamespace runs Check in mount namespaces of its own
// (unshare -m, private propagation), each set up by a shell command before
// the helper runs: what it finds, whether it refuses, and whether a bpffs
// is mounted at /sys/fs/bpf afterwards.
func TestCheckInMountNamespace(t *testing.T) {
	testutil.RequirePrivileged(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, setup string
		allow       bool
		want        string
	}{
		{"host bpffs in a copy of the mounts", "true", false,
			"found=host-bpffs private=false mounted=true"},
		{"fresh bpffs", "mount -t bpf bpf /sys/fs/bpf", false,
			"found= private=true mounted=true"},
		{"fresh bpffs, allowed", "mount -t bpf bpf /sys/fs/bpf", true,
			"found=private private=false mounted=true"},
		// as under ip netns exec: nothing at /sys/fs/bpf, and mounting is refused
		{"no bpffs", "umount -l /sys/fs/bpf", false,
			"found= private=true mounted=false"},
		{"no bpffs, allowed: dpd mounts a private one", "umount -l /sys/fs/bpf", true,
			"found=private private=false mounted=true"},
		// a shared mount whose peers are not the host's: mounted, found
		// missing from PID 1's view, unmounted again
		{"no bpffs on a shared mount the host does not see", "umount -l /sys/fs/bpf && mount --make-shared /sys", false,
			"found= private=true mounted=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", tc.setup+` && exec "$@"`, "sh", self)
			mode := "deny"
			if tc.allow {
				mode = "allow"
			}
			cmd.Env = append(os.Environ(), helperEnv+"="+mode)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, tc.want+" err=") {
				t.Errorf("got  %s\nwant %s err=...", got, tc.want)
			}
		})
	}
	// None of it reached the host's mounts.
	var st unix.Statfs_t
	if err := unix.Statfs(bpffs.Path, &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		t.Errorf("the host's %s is no longer a bpffs: %v", bpffs.Path, err)
	}
}
