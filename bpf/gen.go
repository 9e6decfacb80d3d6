package bpf

// The entry object: dpd.c and the headers beside it, the shared layout in
// include/dpd_abi.h, arch-neutral <asm/*> shims in include/asm (BPF has no
// arch include directory). -mcpu=v3 (kernel >= 5.1) gives 32-bit jumps and
// smaller programs. Output is deterministic: bpf2go strips paths and the
// clang version, so rerunning yields the same bytes.
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -mcpu=v3 -g -Wall -Werror" -target bpfel -type dpd_flow_event -go-package bpf Dpd dpd.c -- -I./include
