package tcbpf

import (
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestKernelHasTCX: on a kernel with TCX (every kernel dpd's CI runs on,
// 6.6 and later), the loopback query succeeds, so an EINVAL from a TCX
// query elsewhere is reported as an error, not as "no programs".
func TestKernelHasTCX(t *testing.T) {
	testutil.RequirePrivileged(t)
	if kernelLacksTCX() {
		t.Fatal("the loopback TCX query failed: this kernel has no TCX, or the query is broken")
	}
	if !tcxQueryWorks.Load() {
		t.Fatal("a successful query was not remembered")
	}
}
