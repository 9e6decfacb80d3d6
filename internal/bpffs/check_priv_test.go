package bpffs_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/dpd-dev/dpd/internal/bpffs"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// On the test machine, in its own mount namespace, Check accepts the
// bpffs for a pin directory that does not exist yet and names the mount.
func TestCheckHost(t *testing.T) {
	testutil.RequirePrivileged(t)
	pin := fmt.Sprintf("%s/dpd-bpffs-test-%d/pins", bpffs.Path, os.Getpid())
	r, err := bpffs.Check(pin, bpffs.Options{})
	if err != nil {
		t.Fatalf("Check(%s): %v", pin, err)
	}
	if r.Found != bpffs.FoundHostNamespace && r.Found != bpffs.FoundHost {
		t.Errorf("Check found %s (%s), want the host's bpffs", r.Found, r.Why)
	}
	if r.Mount != bpffs.Path || r.Device == "" || r.MountID == 0 {
		t.Errorf("report does not name the mount: %+v", r)
	}
	if _, err := os.Stat(pin); !os.IsNotExist(err) {
		t.Errorf("Check created the pin directory: %v", err)
	}
}
