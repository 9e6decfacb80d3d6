package testutil

import "runtime"

// LiveHeap is the heap in use after two collections (the second frees
// what the first only finalised): what a test's data structures hold.
func LiveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
