package bench

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFdinfoProgID(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	prog := write("7", "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nlink_type:\tsched_cls\nprog_tag:\t70104be0efc34437\nprog_id:\t155375\n")
	mapfd := write("8", "pos:\t0\nflags:\t02000002\nmap_type:\t9\nmap_id:\t12\n")
	bad := write("9", "prog_id:\tx\n")
	if id, ok := fdinfoProgID(prog); !ok || id != 155375 {
		t.Errorf("program descriptor: %d %v, want 155375", id, ok)
	}
	for _, p := range []string{mapfd, bad, filepath.Join(dir, "gone")} {
		if id, ok := fdinfoProgID(p); ok {
			t.Errorf("%s: program %d, want none", filepath.Base(p), id)
		}
	}
}
