package policysync

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenBeneathRefusesLinks runs with openat2 and with the O_NOFOLLOW
// walk that replaces it on kernels without it.
func TestOpenBeneathRefusesLinks(t *testing.T) {
	for _, walk := range []bool{false, true} {
		name := "openat2"
		if walk {
			name = "walk"
		}
		t.Run(name, func(t *testing.T) {
			noOpenat2.Store(walk)
			t.Cleanup(func() { noOpenat2.Store(false) })
			dir, outside := t.TempDir(), t.TempDir()
			for _, d := range []string{"a/b", "real"} {
				if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range []string{filepath.Join(dir, "a/b/f"), filepath.Join(outside, "secret")} {
				if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			for link, target := range map[string]string{"a/lf": filepath.Join(outside, "secret"), "ld": outside, "a/rel": "b"} {
				if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
					t.Fatal(err)
				}
			}
			root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer closeFD(root)
			fd, err := openBeneath(root, "a/b/f", unix.O_RDONLY)
			if err != nil {
				t.Fatalf("plain file: %v", err)
			}
			closeFD(fd)
			for _, rel := range []string{"a/lf", "ld/secret", "ld", "a/rel/f"} {
				if fd, err := openBeneath(root, rel, unix.O_RDONLY); !errors.Is(err, errLink) {
					if err == nil {
						closeFD(fd)
					}
					t.Errorf("%s: err = %v, want a refused link", rel, err)
				}
			}
			for _, rel := range []string{"../x", "a/../a/b/f", "/etc/passwd", "a//b", ""} {
				if fd, err := openBeneath(root, rel, unix.O_RDONLY); err == nil {
					closeFD(fd)
					t.Errorf("%s opened", rel)
				}
			}
			if _, err := openBeneath(root, "a/none", unix.O_RDONLY); !errors.Is(err, unix.ENOENT) {
				t.Errorf("missing file: %v, want ENOENT", err)
			}
		})
	}
}
