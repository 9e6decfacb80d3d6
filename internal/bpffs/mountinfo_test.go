package bpffs

import (
	"strings"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	const text = `27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 27 0:22 / /sys rw,nosuid shared:7 master:2 - sysfs sysfs rw
42 23 0:39 / /sys/fs/bpf rw,relatime - bpf bpf rw
50 27 0:40 / /mnt/with\040space rw - tmpfs tmpfs rw
51 42 0:41 / /sys/fs/bpf rw - bpf bpf rw
`
	tab, err := parseMountinfo(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(tab) != 5 {
		t.Fatalf("parsed %d mounts, want 5: %+v", len(tab), tab)
	}
	if m := tab[1]; m.ID != 23 || m.Parent != 27 || m.Dev != "0:22" || m.Point != "/sys" || m.FSType != "sysfs" || !m.Shared {
		t.Errorf("sysfs line = %+v", m)
	}
	if tab[2].Shared {
		t.Errorf("a mount without shared:N is not shared: %+v", tab[2])
	}
	if tab[3].Point != "/mnt/with space" {
		t.Errorf("escaped mount point = %q", tab[3].Point)
	}
	// The later of two mounts on one point is the visible one.
	if m, ok := tab.containing("/sys/fs/bpf/dpd"); !ok || m.ID != 51 {
		t.Errorf("containing(/sys/fs/bpf/dpd) = %+v %v, want mount 51", m, ok)
	}
	if m, ok := tab.containing("/sys/fs/bpfx"); !ok || m.ID != 23 {
		t.Errorf("containing(/sys/fs/bpfx) = %+v %v, want /sys (23)", m, ok)
	}
	if m, ok := tab.root(); !ok || m.ID != 27 {
		t.Errorf("root = %+v %v", m, ok)
	}
	if got := strings.Join(tab.bpfDevs(), ","); got != "0:39,0:41" {
		t.Errorf("bpfDevs = %s", got)
	}
}

func TestParseMountinfoRejectsGarbage(t *testing.T) {
	for _, bad := range []string{"1 2 3\n", "x 1 0:1 / / rw - ext4 a rw\n", "1 1 0:1 / / rw shared:1 ext4 a rw\n"} {
		if _, err := parseMountinfo(strings.NewReader(bad)); err == nil {
			t.Errorf("parseMountinfo(%q) succeeded", bad)
		}
	}
}
