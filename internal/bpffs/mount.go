package bpffs

import (
	"os"

	"golang.org/x/sys/unix"
)

// Path is where dpd expects the BPF filesystem.
const Path = "/sys/fs/bpf"

// Ensure returns nil when a BPF filesystem is mounted at Path, mounting
// one if none is (which needs CAP_SYS_ADMIN).
func Ensure() error {
	var st unix.Statfs_t
	if err := unix.Statfs(Path, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := os.MkdirAll(Path, 0o755); err != nil {
		return err
	}
	return unix.Mount("bpf", Path, "bpf", 0, "")
}
