package nl

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// IPv6State says whether the node's network namespace has IPv6: it has not
// when the kernel was booted without it (no net/ipv6 sysctl tree) or when
// net.ipv6.conf.all.disable_ipv6 is 1. An IPv4-only node is a supported
// setup: the caller turns IPv6 programming off and says so once. reason
// explains a false; err is set only when the state could not be read
// (then on is false too: nothing IPv6 is programmed on a guess).
func (c *Configurer) IPv6State() (on bool, reason string, err error) {
	const rel = "net/ipv6/conf/all/disable_ipv6"
	v, err := readProcSys(filepath.Join(c.procSys, rel))
	if errors.Is(err, fs.ErrNotExist) {
		return false, "the kernel has no IPv6 (booted with ipv6.disable=1 or without the module)", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("read sysctl %s: %w", rel, err)
	}
	if strings.TrimSpace(v) == "1" {
		return false, "net.ipv6.conf.all.disable_ipv6=1", nil
	}
	return true, "", nil
}
