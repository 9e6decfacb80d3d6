package tcbpf

import (
	"errors"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// tcxQueryWorks is set once a TCX query has succeeded: the kernel has TCX,
// and it cannot lose it.
var tcxQueryWorks atomic.Bool

// kernelLacksTCX reports whether the kernel has no TCX hooks, so that a
// TCX query's EINVAL means "nothing can be attached there". It asks about
// the loopback device, which every network namespace has: on a kernel with
// TCX that query succeeds, and an EINVAL about another interface is then a
// real error, never "no programs" (callers decide from the answer what to
// detach or release).
func kernelLacksTCX() bool {
	if tcxQueryWorks.Load() {
		return false
	}
	_, err := link.QueryPrograms(link.QueryOptions{Target: 1, Attach: ebpf.AttachTCXIngress})
	if err == nil {
		tcxQueryWorks.Store(true)
		return false
	}
	return errors.Is(err, unix.EINVAL) || errors.Is(err, ebpf.ErrNotSupported)
}

// tcxMissing reports whether a TCX query failed because the kernel has no
// TCX (EINVAL for the unknown attach type, or cilium/ebpf's own probe),
// not for a reason the caller must report.
func tcxMissing(err error) bool {
	return (errors.Is(err, unix.EINVAL) || errors.Is(err, ebpf.ErrNotSupported)) && kernelLacksTCX()
}
