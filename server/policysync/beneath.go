package policysync

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Everything under the policy-sync directory is reached from a directory
// descriptor without following links: pods write into mount/<uid>/ (it is
// their volume) and whoever writes creds/ is not trusted either, so a link
// there must never make dpd read, create, chmod or delete anything outside.

// errLink marks a path that is, or passes through, a symbolic link.
var errLink = errors.New("is a symbolic link (refused: nothing under the policy-sync directory is followed)")

// noOpenat2 is set once openat2 turned out to be unavailable (kernels
// before 5.6, or a seccomp profile that refuses it).
var noOpenat2 atomic.Bool

// openBeneath opens rel, relative to dirfd and never leaving it, refusing
// every symbolic link on the way and at the end (errLink). flags are
// open(2) flags; O_CLOEXEC and O_NOFOLLOW are added.
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	parts, err := splitRel(rel)
	if err != nil {
		return -1, err
	}
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	how := &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for try := 0; try < 3 && !noOpenat2.Load(); try++ {
		fd, err := unix.Openat2(dirfd, rel, how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue // a rename raced the lookup
		case errors.Is(err, unix.ENOSYS):
			noOpenat2.Store(true)
		case errors.Is(err, unix.EPERM):
			// A seccomp filter refusing openat2, or a real permission
			// problem: the walk tells.
		case errors.Is(err, unix.ELOOP), isLink(dirfd, rel):
			// ELOOP: a link on the way; a final link opened with O_PATH
			// and O_DIRECTORY fails ENOTDIR instead.
			return -1, fmt.Errorf("%s %w", rel, errLink)
		default:
			return -1, fmt.Errorf("open %s: %w", rel, err)
		}
		break
	}
	return walkBeneath(dirfd, parts, flags)
}

// walkBeneath is openBeneath without openat2: one component at a time,
// each opened with O_NOFOLLOW from its parent's descriptor.
func walkBeneath(dirfd int, parts []string, flags int) (int, error) {
	cur, owned := dirfd, false
	defer func() {
		if owned {
			closeFD(cur)
		}
	}()
	for i, p := range parts {
		fl := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i == len(parts)-1 {
			fl = flags
		}
		fd, err := unix.Openat(cur, p, fl, 0)
		if err != nil {
			if isLink(cur, p) {
				return -1, fmt.Errorf("%s %w", strings.Join(parts[:i+1], "/"), errLink)
			}
			return -1, fmt.Errorf("open %s: %w", strings.Join(parts[:i+1], "/"), err)
		}
		if owned {
			closeFD(cur)
		}
		cur, owned = fd, true
	}
	owned = false
	return cur, nil
}

// splitRel checks that rel is a plain relative path: no empty, "." or ".."
// component, not absolute.
func splitRel(rel string) ([]string, error) {
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || strings.IndexByte(p, 0) >= 0 {
			return nil, fmt.Errorf("path %q is not a plain relative path", rel)
		}
	}
	return parts, nil
}

// isLink reports whether name in dirfd is a symbolic link.
func isLink(dirfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// statAt is fstatat without following a final link; ok false if absent.
func statAt(dirfd int, name string) (st unix.Stat_t, ok bool, err error) {
	err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil:
		return st, true, nil
	case errors.Is(err, unix.ENOENT):
		return st, false, nil
	}
	return st, false, fmt.Errorf("stat %s: %w", name, err)
}

// procPath names what fd refers to for calls that take only a path (bind,
// chmod): the kernel resolves /proc/self/fd/N to fd's own file, following
// no link on the way and without the 108-byte limit of a socket path.
func procPath(fd int, name string) string {
	p := fmt.Sprintf("/proc/self/fd/%d", fd)
	if name != "" {
		p += "/" + name
	}
	return p
}

// closeFD closes a descriptor opened here; only reads and O_PATH lookups
// were done through it, so closing cannot lose anything.
func closeFD(fd int) { _ = unix.Close(fd) }
