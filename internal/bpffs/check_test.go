package bpffs

import (
	"errors"
	"strings"
	"testing"
)

// Mount tables of the situations Check must tell apart. The host's init
// sees its bpffs (0:39) on a shared /sys.
const (
	hostInfo = `27 1 254:0 / / rw shared:1 - ext4 /dev/vda rw
23 27 0:22 / /sys rw shared:7 - sysfs sysfs rw
42 23 0:39 / /sys/fs/bpf rw shared:8 - bpf bpf rw
`
	// ip netns exec: a copy of the mounts made slave, /sys replaced by a
	// fresh sysfs of the network namespace, no bpffs.
	netnsExecInfo = `45 44 254:0 / / rw master:1 - ext4 /dev/vda rw
49 45 0:40 / /sys rw - sysfs myns rw
`
	// unshare -m: a private copy, the host's bpffs (same superblock) in it.
	unshareInfo = `60 59 254:0 / / rw - ext4 /dev/vda rw
61 60 0:22 / /sys rw - sysfs sysfs rw
62 61 0:39 / /sys/fs/bpf rw - bpf bpf rw
`
	// unshare -m, then a fresh bpffs mounted over the host's.
	unshareFreshInfo = unshareInfo + `63 61 0:50 / /sys/fs/bpf rw - bpf bpf rw
`
	// A container whose /sys/fs/bpf is the host's, bind-mounted in
	// (Kubernetes hostPath, Bidirectional).
	containerInfo = `80 70 0:60 / / rw - overlay overlay rw
81 80 0:61 / /sys ro - sysfs sysfs ro
82 81 0:39 / /sys/fs/bpf rw shared:8 - bpf bpf rw
`
	// A container without it: nothing at /sys/fs/bpf.
	containerBareInfo = `80 70 0:60 / / rw - overlay overlay rw
81 80 0:61 / /sys ro - sysfs sysfs ro
`
	// A container with a Bidirectional hostPath of a host /sys/fs/bpf on
	// which nothing is mounted yet.
	containerSharedDirInfo = containerBareInfo + `83 81 0:22 /fs/bpf /sys/fs/bpf rw shared:7 - sysfs sysfs rw
`
)

func table(t *testing.T, text string) mountTable {
	t.Helper()
	tab, err := parseMountinfo(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func TestJudge(t *testing.T) {
	const pin = "/sys/fs/bpf/dpd"
	const containerWhy = "dpd has a PID namespace of its own"
	tests := []struct {
		name  string
		f     facts
		allow bool
		// want is Report.Found, or "" for a refusal
		want       string
		wantMount  bool
		wantVerify bool
		errHas     []string
	}{
		{name: "host, new kernel (fixed initial mount namespace inode)",
			f:    facts{onBPF: true, dev: "0:39", mntNS: initMntNS, self: table(t, hostInfo), init: table(t, hostInfo)},
			want: FoundHostNamespace},
		{name: "host, older kernel: same root mount as PID 1",
			f:    facts{onBPF: true, dev: "0:39", mntNS: "mnt:[4026531840]", self: table(t, hostInfo), init: table(t, hostInfo)},
			want: FoundHostNamespace},
		{name: "host without a bpffs: dpd mounts one",
			f:    facts{dev: "0:22", mntNS: initMntNS, self: table(t, "27 1 254:0 / / rw - ext4 /dev/vda rw\n23 27 0:22 / /sys rw - sysfs sysfs rw\n")},
			want: FoundMounted, wantMount: true},
		{name: "ip netns exec",
			f:      facts{dev: "0:40", mntNS: "mnt:[4026532246]", self: table(t, netnsExecInfo), init: table(t, hostInfo)},
			errHas: []string{"no bpffs is mounted at /sys/fs/bpf", "mount namespace is not the host init's", "nsenter --net=", "ip netns exec", "Bidirectional", "--allow-private-bpffs"}},
		{name: "ip netns exec, private allowed",
			f:     facts{dev: "0:40", mntNS: "mnt:[4026532246]", self: table(t, netnsExecInfo), init: table(t, hostInfo)},
			allow: true, want: FoundPrivate, wantMount: true},
		{name: "unshare -m with a fresh bpffs",
			f:      facts{onBPF: true, dev: "0:50", mntNS: "mnt:[4026532300]", self: table(t, unshareFreshInfo), init: table(t, hostInfo)},
			errHas: []string{"device 0:50", "bpffs devices 0:39", "private to dpd's mount namespace", "nsenter", "Bidirectional"}},
		{name: "unshare -m with a fresh bpffs, private allowed",
			f:     facts{onBPF: true, dev: "0:50", mntNS: "mnt:[4026532300]", self: table(t, unshareFreshInfo), init: table(t, hostInfo)},
			allow: true, want: FoundPrivate},
		{name: "unshare -m keeping the host's bpffs",
			f:    facts{onBPF: true, dev: "0:39", mntNS: "mnt:[4026532300]", self: table(t, unshareInfo), init: table(t, hostInfo)},
			want: FoundHost},
		{name: "hostPID container with the host's bpffs",
			f:    facts{onBPF: true, dev: "0:39", mntNS: "mnt:[4026532400]", self: table(t, containerInfo), init: table(t, hostInfo)},
			want: FoundHost},
		{name: "container with the host's bpffs",
			f:    facts{onBPF: true, dev: "0:39", mntNS: "mnt:[4026532400]", self: table(t, containerInfo), initWhy: containerWhy},
			want: FoundUnverified},
		{name: "container without the host's bpffs",
			f:      facts{dev: "0:61", mntNS: "mnt:[4026532400]", self: table(t, containerBareInfo), initWhy: containerWhy},
			errHas: []string{"no bpffs is mounted", containerWhy, "hostPath", "Bidirectional"}},
		{name: "container with a Bidirectional hostPath, host has no bpffs yet",
			f:    facts{dev: "0:22", mntNS: "mnt:[4026532400]", self: table(t, containerSharedDirInfo), initWhy: containerWhy},
			want: FoundMounted, wantMount: true},
		{name: "hostPID container with a Bidirectional hostPath: verified after mounting",
			f:    facts{dev: "0:22", mntNS: "mnt:[4026532400]", self: table(t, containerSharedDirInfo), init: table(t, "27 1 254:0 / / rw - ext4 /dev/vda rw\n")},
			want: FoundMounted, wantMount: true, wantVerify: true},
		{name: "PID 1 unreadable, older kernel, bpffs mounted",
			f:    facts{onBPF: true, dev: "0:39", mntNS: "mnt:[4026531840]", self: table(t, hostInfo), initWhy: "cannot read the host init's mounts: permission denied"},
			want: FoundUnverified},
		{name: "PID 1 unreadable, older kernel, no bpffs: not known to be shared",
			f:      facts{dev: "0:40", mntNS: "mnt:[4026531840]", self: table(t, netnsExecInfo), initWhy: "cannot read the host init's mounts: permission denied"},
			errHas: []string{"permission denied", "nsenter"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f.pinDir, tt.f.probe = pin, "/sys/fs/bpf"
			p, err := judge(tt.f, Options{AllowPrivate: tt.allow})
			if tt.want == "" {
				if !errors.Is(err, ErrPrivate) {
					t.Fatalf("judge = %+v, %v; want a refusal wrapping ErrPrivate", p, err)
				}
				for _, s := range tt.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("refusal lacks %q: %v", s, err)
					}
				}
				if p.mount {
					t.Errorf("a refusal plans a mount")
				}
				return
			}
			if err != nil {
				t.Fatalf("judge: %v", err)
			}
			if p.report.Found != tt.want || p.mount != tt.wantMount || p.verify != tt.wantVerify {
				t.Errorf("judge = found %s mount %v verify %v (%s), want %s %v %v", p.report.Found, p.mount, p.verify, p.report.Why, tt.want, tt.wantMount, tt.wantVerify)
			}
			if p.report.Why == "" {
				t.Errorf("report says not why")
			}
		})
	}
}

// A pin directory outside /sys/fs/bpf that is not on a bpffs is an error
// even with private allowed: mounting at /sys/fs/bpf would not help it.
func TestJudgePinDirOffBPFFS(t *testing.T) {
	f := facts{pinDir: "/var/lib/dpd/pins", probe: "/var/lib", dev: "254:0", mntNS: initMntNS, self: table(t, hostInfo), init: table(t, hostInfo)}
	for _, allow := range []bool{false, true} {
		_, err := judge(f, Options{AllowPrivate: allow})
		if err == nil || errors.Is(err, ErrPrivate) || !strings.Contains(err.Error(), "not on a bpffs") {
			t.Errorf("allow=%v: judge = %v, want 'not on a bpffs'", allow, err)
		}
	}
}
