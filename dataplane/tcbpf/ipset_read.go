package tcbpf

import (
	"errors"

	"github.com/cilium/ebpf"
)

// readAll calls fn for every entry of m: in batches of keyChunk where the
// kernel supports batch lookups for the map type (a restart reads every
// member of every set: one syscall per thousand entries instead of two per
// entry), else one entry at a time.
func readAll[K, V any](m *ebpf.Map, fn func(K, V)) error {
	keys := make([]K, keyChunk)
	vals := make([]V, keyChunk)
	var c ebpf.MapBatchCursor
	for read := 0; ; {
		n, err := m.BatchLookup(&c, keys, vals, nil)
		for i := range n {
			fn(keys[i], vals[i])
		}
		read += n
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil // the end
		case errors.Is(err, ebpf.ErrNotSupported) && read == 0:
			return readEach(m, fn)
		case err != nil:
			return err
		}
	}
}

func readEach[K, V any](m *ebpf.Map, fn func(K, V)) error {
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		fn(k, v)
	}
	return it.Err()
}
