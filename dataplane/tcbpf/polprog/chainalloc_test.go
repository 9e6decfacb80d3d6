package polprog

import (
	"sync"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/internal/testutil"
)

func TestChainAllocator(t *testing.T) {
	testutil.RequirePrivileged(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })

	// Concurrent users never share an index.
	var mu sync.Mutex
	owner := map[uint32]int{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				a, idx, err := takeChain(m, 3)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, i := range idx {
					if o, ok := owner[i]; ok {
						t.Errorf("index %d given to %d while %d holds it", i, g, o)
					}
					owner[i] = g
				}
				mu.Unlock()
				mu.Lock()
				for _, i := range idx {
					delete(owner, i)
				}
				mu.Unlock()
				a.release(idx)
			}
		}()
	}
	wg.Wait()
	if n := chainInUse(m); n != 0 {
		t.Fatalf("%d in use after all releases", n)
	}

	// Next-fit: a freed index is not handed out again right away.
	a, first, err := takeChain(m, 1)
	if err != nil {
		t.Fatal(err)
	}
	a.release(first)
	_, second, err := takeChain(m, 1)
	if err != nil {
		t.Fatal(err)
	}
	if second[0] == first[0] {
		t.Errorf("index %d reused immediately", first[0])
	}
	a.release(second)

	// Exhaustion is an error, not a partial allocation.
	if _, _, err := takeChain(m, 65); err == nil {
		t.Fatal("allocated 65 indices of a 64-entry map")
	}
	if n := chainInUse(m); n != 0 {
		t.Fatalf("failed allocation left %d in use", n)
	}
}
