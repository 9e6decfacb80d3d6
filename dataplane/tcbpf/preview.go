package tcbpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// dpd_preview survives a restart like dpd_jump: Open leaves it as it is,
// so the epilogue of a restarted dpd keeps previewing with the programs
// the previous one installed until its first apply adopts or replaces
// them. What an earlier dpd left there is the caller's to adopt or clear.

// Previews lists the staged preview programs installed in dpd_preview,
// indexed like Policies.
func (d *Datapath) Previews() ([]PolicyEntry, error) {
	var out []PolicyEntry
	var k, v uint32
	it := d.objs.DpdPreview.Iterate()
	for it.Next(&k, &v) {
		if k < abi.JumpPolBase {
			continue
		}
		out = append(out, PolicyEntry{Slot: (k - abi.JumpPolBase) / 2, Dir: int((k - abi.JumpPolBase) % 2), Prog: ebpf.ProgramID(v)})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", abi.MapPreview, err)
	}
	return out, nil
}

// ClearPreviews empties dpd_preview: previews are off, or what is there
// belongs to no endpoint this process knows.
func (d *Datapath) ClearPreviews() error {
	var keys []uint32
	var k, v uint32
	it := d.objs.DpdPreview.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list staged previews: %w", err)
	}
	for _, k := range keys {
		if err := d.objs.DpdPreview.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear staged preview %d: %w", k, err)
		}
	}
	return nil
}
