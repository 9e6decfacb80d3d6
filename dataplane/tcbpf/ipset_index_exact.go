package tcbpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Full-length index entries (/32, /128: most members are pod addresses)
// live in dpd_ipset_idxh, a hash with the trie's keys, which a policy
// asks first: its hit is the longest match, for a fraction of a deep
// trie walk. The hash's buckets are allocated for its maximum size, so it
// holds a quarter of BPFMapSizeIPSets; entries that do not fit go to the
// trie, which answers for them as well. A trie copy of an entry the hash
// also holds is shadowed and goes with the entry.

// exactEntries is the hash's size for n set members.
func exactEntries(n int) uint32 { return uint32(max(1024, n/4)) }

// full reports whether p is a full-length prefix of its family.
func (p idxPfx) full() bool { return (p.family == 4 && p.bits == 32) || p.bits == 128 }

// openIdxHash opens (or creates) the pinned dpd_ipset_idxh.
func (d *Datapath) openIdxHash() (*ebpf.Map, error) {
	spec := &ebpf.MapSpec{
		Name: abi.MapIPSetIdxHash, Type: ebpf.Hash, KeySize: abi.IPSetIdxKeySize, ValueSize: 4,
		MaxEntries: exactEntries(d.sizes.IPSets), Flags: unix.BPF_F_NO_PREALLOC, Pinning: ebpf.PinByName,
	}
	opts := ebpf.MapOptions{PinPath: d.opts.PinDir}
	m, err := ebpf.NewMapWithOptions(spec, opts)
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		// Derived data: start afresh (programs still using it keep it).
		if err := os.Remove(filepath.Join(d.opts.PinDir, abi.MapIPSetIdxHash)); err != nil {
			return nil, fmt.Errorf("replace %s: %w", abi.MapIPSetIdxHash, err)
		}
		m, err = ebpf.NewMapWithOptions(spec, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", abi.MapIPSetIdxHash, err)
	}
	return m, nil
}

// IPSetIndexHash is dpd_ipset_idxh, for polprog.Maps.IPSetIdxHash.
func (d *Datapath) IPSetIndexHash() *ebpf.Map {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.setIdx == nil {
		return nil
	}
	return d.setIdx.h
}

// writeExact writes full-length entries with their combination ids into
// the hash and returns those that did not fit.
func (x *ipsetIndex) writeExact(ps []idxPfx, ids []idxVal) (spill []idxPfx, spillIDs []idxVal, err error) {
	keys := make([]idxKey, min(len(ps), keyChunk))
	vals := make([]idxVal, len(keys))
	for len(ps) > 0 {
		chunk := ps[:min(len(ps), keyChunk)]
		for i, p := range chunk {
			keys[i] = p.key()
		}
		copy(vals, ids[:len(chunk)])
		n, err := x.h.BatchUpdate(keys[:len(chunk)], vals[:len(chunk)], nil)
		switch {
		case err == nil:
		case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, unix.E2BIG):
			if errors.Is(err, ebpf.ErrNotSupported) {
				n = 0
			}
			for i := n; i < len(chunk); i++ {
				err := x.h.Update(&keys[i], &vals[i], ebpf.UpdateAny)
				if errors.Is(err, unix.E2BIG) { // full
					spill, spillIDs = append(spill, chunk[i]), append(spillIDs, vals[i])
				} else if err != nil {
					return spill, spillIDs, fmt.Errorf("write %s: %w", abi.MapIPSetIdxHash, err)
				}
			}
		default:
			return spill, spillIDs, fmt.Errorf("write %s: %w", abi.MapIPSetIdxHash, err)
		}
		ps, ids = ps[len(chunk):], ids[len(chunk):]
	}
	return spill, spillIDs, nil
}
