// Package bpf holds dpd's C entry programs (dpd.c: dpd_from_wep, dpd_to_wep,
// dpd_epilogue) and their bpf2go output: LoadDpd returns the CollectionSpec
// that dataplane/tcbpf loads, sizes and pins. The shared layout is
// include/dpd_abi.h, mirrored in dataplane/tcbpf/abi. Regenerate with
// `go generate ./bpf/`.
package bpf
