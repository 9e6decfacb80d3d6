package bpffs

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// mount is one line of /proc/<pid>/mountinfo.
type mount struct {
	ID     int
	Parent int
	Dev    string // "major:minor" of the superblock
	Point  string // mount point, unescaped
	FSType string
	Shared bool // propagates mounts to a peer group ("shared:N")
}

// mountTable is a process's view of the mounts, in mountinfo order (a
// later mount on the same point hides an earlier one).
type mountTable []mount

// parseMountinfo reads the format of proc(5) mountinfo.
func parseMountinfo(r io.Reader) (mountTable, error) {
	var t mountTable
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 7 || sep < 0 || sep+1 >= len(f) {
			return nil, fmt.Errorf("mountinfo line %d: %d fields, no separator", n, len(f))
		}
		id, err1 := strconv.Atoi(f[0])
		parent, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("mountinfo line %d: bad mount ids %q %q", n, f[0], f[1])
		}
		m := mount{ID: id, Parent: parent, Dev: f[2], Point: unescape(f[4]), FSType: f[sep+1]}
		for _, opt := range f[6:sep] {
			if strings.HasPrefix(opt, "shared:") {
				m.Shared = true
			}
		}
		t = append(t, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return t, nil
}

// unescape undoes mountinfo's octal escapes (\040 for a space and so on).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// containing returns the mount that holds path (absolute and clean): the
// last mount whose point is path or an ancestor of it, longest first.
func (t mountTable) containing(path string) (mount, bool) {
	best, found := mount{}, false
	for _, m := range t {
		if !under(path, m.Point) {
			continue
		}
		if !found || len(m.Point) >= len(best.Point) {
			best, found = m, true
		}
	}
	return best, found
}

// root returns the mount at "/" that the process sees.
func (t mountTable) root() (mount, bool) { return t.containing("/") }

// hasBPF reports whether t has a bpffs mount of superblock dev.
func (t mountTable) hasBPF(dev string) bool {
	for _, m := range t {
		if m.FSType == "bpf" && m.Dev == dev {
			return true
		}
	}
	return false
}

// bpfDevs lists the distinct superblocks of t's bpffs mounts.
func (t mountTable) bpfDevs() []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range t {
		if m.FSType == "bpf" && !seen[m.Dev] {
			seen[m.Dev] = true
			out = append(out, m.Dev)
		}
	}
	return out
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	if dir == "/" || path == dir {
		return true
	}
	return strings.HasPrefix(path, dir+"/")
}
