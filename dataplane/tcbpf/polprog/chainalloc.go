package polprog

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
)

// chainAlloc hands out the indices of one dpd_chain map. Every Program
// takes one index per continuation chunk and gives them back on Close.
type chainAlloc struct {
	size uint32
	used []bool // guarded by chainAllocs.mu
	n    int    // indices in use; guarded by chainAllocs.mu
	// next is where the search for free indices starts; guarded by
	// chainAllocs.mu. Next-fit keeps a just-freed index out of use for as
	// long as possible, so a packet still in a closed program's chunk can
	// only hit an empty slot (fail closed), not another program's chunk.
	next uint32
}

// chainAllocs holds one allocator per kernel map (keyed by map id, so two
// handles of one pinned map share it). Allocators are kept when idle so the
// next-fit cursor survives; there is one chain map per process in practice.
var chainAllocs = struct {
	mu    sync.Mutex
	byKey map[any]*chainAlloc // guarded by mu
}{byKey: map[any]*chainAlloc{}}

func chainKey(m *ebpf.Map) any {
	if info, err := m.Info(); err == nil {
		if id, ok := info.ID(); ok {
			return id
		}
	}
	return m // no map ids (old kernel): fall back to the handle
}

// allocLocked returns the allocator of the map keyed key, creating it, or
// replacing an idle one of another size. chainAllocs.mu must be held.
func allocLocked(key any, size uint32) *chainAlloc {
	a := chainAllocs.byKey[key]
	if a == nil || (a.size != size && a.n == 0) {
		a = &chainAlloc{size: size, used: make([]bool, size)}
		chainAllocs.byKey[key] = a
	}
	return a
}

// takeChain allocates n free indices of m.
func takeChain(m *ebpf.Map, n int) (*chainAlloc, []uint32, error) {
	key := chainKey(m)
	chainAllocs.mu.Lock()
	defer chainAllocs.mu.Unlock()
	a := allocLocked(key, m.MaxEntries())
	out := make([]uint32, 0, n)
	for k := uint32(0); k < a.size && len(out) < n; k++ {
		if i := (a.next + k) % a.size; !a.used[i] {
			out = append(out, i)
		}
	}
	if len(out) < n {
		return nil, nil, fmt.Errorf("%s: %d free of %d entries, need %d", mapChain, len(out), a.size, n)
	}
	for _, i := range out {
		a.used[i] = true
	}
	if n > 0 {
		a.next = (out[n-1] + 1) % a.size
	}
	a.n += n
	return a, out, nil
}

// reserveChain marks idx of m as taken: the indices of a pinned program
// an earlier process loaded. An index already taken is an error.
func reserveChain(m *ebpf.Map, idx []uint32) (*chainAlloc, error) {
	key := chainKey(m)
	chainAllocs.mu.Lock()
	defer chainAllocs.mu.Unlock()
	a := allocLocked(key, m.MaxEntries())
	seen := make(map[uint32]bool, len(idx))
	for _, i := range idx {
		if i >= a.size {
			return nil, fmt.Errorf("%s index %d beyond its %d entries", mapChain, i, a.size)
		}
		if a.used[i] || seen[i] {
			return nil, fmt.Errorf("%s index %d is taken", mapChain, i)
		}
		seen[i] = true
	}
	for _, i := range idx {
		a.used[i] = true
	}
	a.n += len(idx)
	return a, nil
}

// release returns indices to the allocator.
func (a *chainAlloc) release(idx []uint32) {
	chainAllocs.mu.Lock()
	defer chainAllocs.mu.Unlock()
	for _, i := range idx {
		if a.used[i] {
			a.used[i] = false
			a.n--
		}
	}
}

// chainInUse reports how many indices of m are allocated (for tests).
func chainInUse(m *ebpf.Map) int {
	chainAllocs.mu.Lock()
	defer chainAllocs.mu.Unlock()
	a := chainAllocs.byKey[chainKey(m)]
	if a == nil {
		return 0
	}
	return a.n
}
