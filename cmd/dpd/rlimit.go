package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// raiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit: every
// policy-sync workload and client costs a descriptor, and the usual soft
// limit of 1024 is far below a node's needs. (The Go runtime does the same
// at start-up for the process itself; doing it here states it, reports the
// figure, and lets children inherit it.)
func raiseFileLimit() (soft, hard uint64, err error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, fmt.Errorf("get RLIMIT_NOFILE: %w", err)
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			return 0, 0, fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", rl.Max, err)
		}
	}
	return rl.Cur, rl.Max, nil
}
