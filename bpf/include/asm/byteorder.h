/* Shim: the programs are built for bpfel only (see bpf/gen.go). */
#include <linux/byteorder/little_endian.h>
