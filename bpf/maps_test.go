package bpf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMapsLiveInMapsHeader: every map of the entry object is defined in
// dpd_maps.h, as its comment promises, so one file answers what the entry
// programs share and pin.
func TestMapsLiveInMapsHeader(t *testing.T) {
	files, err := filepath.Glob("*.[ch]")
	if err != nil {
		t.Fatal(err)
	}
	inc, err := filepath.Glob("include/*.h")
	if err != nil {
		t.Fatal(err)
	}
	maps := 0
	for _, f := range append(files, inc...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n := strings.Count(string(b), `SEC(".maps")`)
		if f == "dpd_maps.h" {
			maps = n
			// Types and maps apart from logic: the functions that use
			// the maps live in the headers named for what they do.
			if strings.Contains(string(b), "static __always_inline") || strings.Contains(string(b), "static inline") {
				t.Errorf("dpd_maps.h defines a function; it belongs in a header of its own")
			}
		} else if n > 0 {
			t.Errorf("%s defines %d maps; they belong in dpd_maps.h", f, n)
		}
	}
	spec, err := LoadDpd()
	if err != nil {
		t.Fatal(err)
	}
	objMaps := 0
	for name := range spec.Maps {
		if !strings.HasPrefix(name, ".") { // .bss, .rodata: globals, not maps
			objMaps++
		}
	}
	if maps != objMaps {
		t.Errorf("dpd_maps.h defines %d maps, the object has %d", maps, objMaps)
	}
}
