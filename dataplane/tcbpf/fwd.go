package tcbpf

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// setFwdCfg tells the entry programs and the epilogue whether a packet a
// workload sends to another workload of this node is redirected straight
// to the destination's interface (bpf/dpd_fwd.h) or left to the host's IP
// stack, and whether an established flow's packet may go on into the
// destination's namespace. Written at every Open: the map is pinned, and
// a restart may change the setting.
func (d *Datapath) setFwdCfg(viaStack, hostSide bool) error {
	var cfg bpf.DpdDpdFwdCfg
	if viaStack {
		cfg.Flags |= abi.FwdCfgStack
	}
	if hostSide {
		cfg.Flags |= abi.FwdCfgNoPeer
	}
	if err := d.objs.DpdFwdCfg.Update(uint32(0), &cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write %s: %w", abi.MapFwdCfg, err)
	}
	return nil
}
