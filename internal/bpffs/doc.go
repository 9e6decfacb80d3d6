// Package bpffs makes sure dpd's pin directory is on a BPF filesystem the
// host shares: pins on a bpffs private to dpd's mount namespace (as under
// 'ip netns exec', or in a container without the host's /sys/fs/bpf) die
// with it, and a dpd started that way would take over the programs of the
// previous one without their maps. It mounts a bpffs at /sys/fs/bpf when
// none is there and the mount would be shared, and refuses a private one
// unless told that is wanted. The daemon's host check and the privileged
// test guard share it.
package bpffs
