package tcbpf

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// controlContext is the head of struct __sk_buff up to cb[]: the control
// programs (bpf/dpd_control.h) take their arguments in cb, which
// BPF_PROG_TEST_RUN lets a caller set.
type controlContext struct {
	skbContext
	TCIndex uint32
	CB      [5]uint32
}

// controlFrame is the smallest packet a tc program runs on: an Ethernet
// header, which the control programs never read.
var controlFrame = make([]byte, 14)

// runControl runs a control program with cb as its arguments; non-zero
// returns are the program's own refusal.
func runControl(prog *ebpf.Program, cb ...uint32) (uint32, error) {
	var ctx controlContext
	copy(ctx.CB[:], cb)
	ret, err := prog.Run(&ebpf.RunOptions{Data: controlFrame, Context: &ctx})
	if err != nil {
		return 0, fmt.Errorf("run control program: %w", err)
	}
	return ret, nil
}
