/* Shim: BPF is a 64-bit target with no arch directory; use the generic uapi header. */
#include <asm-generic/posix_types.h>
