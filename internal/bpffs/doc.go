// Package bpffs makes sure the BPF filesystem is mounted at /sys/fs/bpf,
// where dpd pins its maps and programs. The daemon's host check and the
// privileged-test guard share it.
package bpffs
