package policysync

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// watchMask is what makes the binder look at creds/ again: entries coming
// and going, and files finished or changed in place. IN_MODIFY is left
// out: a writer streaming a big file would wake the binder per write;
// IN_CLOSE_WRITE, and the periodic resync, see the result.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_CLOSE_WRITE | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watcher turns inotify events on creds/ into wake-ups (coalesced: one
// pending at most), so an idle node costs nothing and a new file is seen
// at once.
type watcher struct {
	f    *os.File
	wd   int
	wake chan struct{}
	done chan struct{}
}

// newWatcher watches the directory dirfd refers to (through /proc, so the
// watch is on the directory held, whatever its name points to now).
func newWatcher(dirfd int) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &watcher{f: os.NewFile(uintptr(fd), "inotify"), wd: -1, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if err := w.watch(dirfd); err != nil {
		w.f.Close()
		return nil, err
	}
	go w.read()
	return w, nil
}

// watch moves the watch to the directory dirfd refers to.
func (w *watcher) watch(dirfd int) error {
	var werr error
	var wd int
	rc, err := w.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	if err := rc.Control(func(fd uintptr) {
		if w.wd >= 0 {
			_, _ = unix.InotifyRmWatch(int(fd), uint32(w.wd)) // gone with its directory, maybe
		}
		wd, werr = unix.InotifyAddWatch(int(fd), procPath(dirfd, ""), watchMask)
	}); err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	if werr != nil {
		return fmt.Errorf("inotify watch: %w", werr)
	}
	w.wd = wd
	return nil
}

// read drains events until the watcher is closed; their content does not
// matter: any event means "scan".
func (w *watcher) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		_, err := w.f.Read(buf)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return // closed
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *watcher) close() {
	w.f.Close()
	<-w.done
}

// stamp identifies a version of a file without reading it: a file refused
// for what it holds is read again only once its stamp changes.
type stamp struct {
	dev, ino, size uint64
	mtime, ctime   int64
}

func stampOf(st *unix.Stat_t) stamp {
	return stamp{dev: st.Dev, ino: st.Ino, size: uint64(st.Size),
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}
