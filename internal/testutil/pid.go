package testutil

import "os"

// pidSuffix keeps names from parallel test binaries apart.
func pidSuffix() int { return os.Getpid() % 100000 }
