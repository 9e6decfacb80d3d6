package policysync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// SocketMode is a workload socket's mode. Calico's binder makes it 0777:
// the pod's processes run as any user, and only the pod (and root) sees
// its mount. Connecting needs write permission only, so 0666 grants the
// same without the meaningless execute bits.
const SocketMode = 0o666

// errSocket marks a problem with mount/<uid>/ or its socket (as opposed
// to the credentials).
var errSocket = errors.New("workload socket")

// workloadDir opens mount/<uid>/ under the policy-sync root, creating it
// if absent (created then says so); links are refused.
func workloadDir(rootfd int, uid string) (fd int, created bool, err error) {
	mfd, err := openBeneath(rootfd, MountSubdir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, false, err
	}
	defer closeFD(mfd)
	switch err := unix.Mkdirat(mfd, uid, 0o755); {
	case err == nil:
		created = true
	case !errors.Is(err, unix.EEXIST):
		return -1, false, fmt.Errorf("create %s/%s: %w", MountSubdir, uid, err)
	}
	fd, err = openBeneath(mfd, uid, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		if created {
			_ = unix.Unlinkat(mfd, uid, unix.AT_REMOVEDIR)
		}
		return -1, false, fmt.Errorf("%s/%w", MountSubdir, err)
	}
	return fd, created, nil
}

// removeWorkloadDir removes mount/<uid>/ if it is an empty directory (the
// workload may have put things there).
func removeWorkloadDir(rootfd int, uid string) {
	mfd, err := openBeneath(rootfd, MountSubdir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return
	}
	defer closeFD(mfd)
	_ = unix.Unlinkat(mfd, uid, unix.AT_REMOVEDIR) // a link or a full directory stays
}

// listenIn serves a Unix socket named SocketFilename in the directory
// dirfd with SocketMode. A socket already there (an earlier dpd, a crash)
// is replaced, as Calico's binder does; anything else there is refused. It
// returns the socket's inode so removal deletes only this socket.
func listenIn(dirfd int) (net.Listener, uint64, error) {
	st, ok, err := statAt(dirfd, SocketFilename)
	switch {
	case err != nil:
		return nil, 0, err
	case ok && st.Mode&unix.S_IFMT != unix.S_IFSOCK:
		return nil, 0, fmt.Errorf("%w: %s exists and is not a socket (refused: not replaced)", errSocket, SocketFilename)
	case ok:
		if err := unix.Unlinkat(dirfd, SocketFilename, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, 0, fmt.Errorf("%w: remove old socket: %w", errSocket, err)
		}
	}
	// The mode is set on the socket before bind (the kernel applies the
	// umask on top) and again through a descriptor of the bound socket
	// itself, never by path: the pod can swap the name for a link.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.Fchmod(int(fd), SocketMode) }); err != nil {
			return err
		}
		return serr
	}}
	l, err := lc.Listen(context.Background(), "unix", procPath(dirfd, SocketFilename))
	if err != nil {
		return nil, 0, fmt.Errorf("%w: listen: %w", errSocket, err)
	}
	// Closing must not unlink by path: /proc/self/fd/N names another
	// directory once N is closed.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	ino, err := chmodSocket(dirfd)
	if err != nil {
		l.Close()
		removeSocketIn(dirfd, 0)
		return nil, 0, fmt.Errorf("%w: %w", errSocket, err)
	}
	return l, ino, nil
}

// chmodSocket gives the socket in dirfd SocketMode through an O_PATH
// descriptor of it, refusing anything that is not a socket by then.
func chmodSocket(dirfd int) (uint64, error) {
	fd, err := unix.Openat(dirfd, SocketFilename, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open bound socket: %w", err)
	}
	defer closeFD(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("stat bound socket: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return 0, errors.New("the bound socket was replaced (refused)")
	}
	if st.Mode&0o7777 != SocketMode {
		if err := unix.Chmod(procPath(fd, ""), SocketMode); err != nil {
			return 0, fmt.Errorf("chmod socket: %w", err)
		}
	}
	return st.Ino, nil
}

// removeSocketIn deletes the socket in dirfd if it is still a socket and,
// when ino is not 0, the one dpd bound.
func removeSocketIn(dirfd int, ino uint64) {
	st, ok, err := statAt(dirfd, SocketFilename)
	if err != nil || !ok || st.Mode&unix.S_IFMT != unix.S_IFSOCK || (ino != 0 && st.Ino != ino) {
		return
	}
	_ = unix.Unlinkat(dirfd, SocketFilename, 0)
}
