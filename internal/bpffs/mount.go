package bpffs

// Path is where dpd expects the BPF filesystem, and where it mounts one.
const Path = "/sys/fs/bpf"
