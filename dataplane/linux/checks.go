package linux

import (
	"errors"
	"fmt"
	"os"

	"github.com/dpd-dev/dpd/internal/bpffs"
)

// CheckHost verifies what --dataplane=linux needs and mounts bpffs when it
// may (a bpffs private to dpd's mount namespace only with allowPrivate).
// The error says what is missing and how to fix it.
func CheckHost(allowPrivate bool) error {
	var problems []error
	if os.Geteuid() != 0 {
		problems = append(problems, errors.New("not running as root: run dpd privileged (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN)"))
	}
	if err := bpffs.Ensure(bpffs.Options{AllowPrivate: allowPrivate}); err != nil {
		problems = append(problems, fmt.Errorf("bpffs is not mounted at /sys/fs/bpf and mounting it failed (%w): run 'mount -t bpf bpf /sys/fs/bpf'", err))
	}
	if len(problems) == 0 {
		return nil
	}
	problems = append(problems, errors.New("for a dry run without a kernel dataplane use --dataplane=memory"))
	return errors.Join(problems...)
}
