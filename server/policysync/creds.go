package policysync

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Calico's layout under the policy-sync directory (pod2daemon's flexvolume
// driver writes the credentials; the socket goes into the mount).
const (
	CredsSubdir    = "creds"
	MountSubdir    = "mount"
	CredsExt       = ".json"
	SocketFilename = "socket"
)

// The endpoint a policy-sync client stands for, as Calico's server maps
// credentials: orchestrator "k8s", workload "namespace/name", "eth0".
const (
	OrchestratorID = "k8s"
	EndpointID     = "eth0"
)

// Credentials is a workload's credentials file. The flexvolume driver
// writes Go field names ({"UID": ..., "ServiceAccount": ...}); JSON field
// matching is case-insensitive, so {"uid": ..., "serviceAccount": ...}
// reads the same.
type Credentials struct {
	UID            string `json:"uid"`
	Workload       string `json:"workload"`
	Namespace      string `json:"namespace"`
	ServiceAccount string `json:"serviceAccount"`
}

// WorkloadID is the workload endpoint the credentials stand for.
func (c Credentials) WorkloadID() model.WorkloadID {
	return model.WorkloadID{Orchestrator: OrchestratorID, Workload: c.Namespace + "/" + c.Workload, Endpoint: EndpointID}
}

// ReadCredentials reads and checks a credentials file; uid is the file's
// name without ".json" and must match a uid inside, if one is given. A
// symbolic link is refused.
func ReadCredentials(path, uid string) (Credentials, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return Credentials{}, fmt.Errorf("credentials %s %w", path, errLink)
		}
		return Credentials{}, fmt.Errorf("read credentials: %w", err)
	}
	return readCredentialsFD(fd, uid)
}

// readCredentialsAt reads uid's credentials file in the creds/ directory
// dirfd, following no link.
func readCredentialsAt(dirfd int, uid string) (Credentials, error) {
	// O_NONBLOCK: a FIFO put there must not hang the binder.
	fd, err := openBeneath(dirfd, uid+CredsExt, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return Credentials{}, fmt.Errorf("credentials: %w", err)
	}
	return readCredentialsFD(fd, uid)
}

// readCredentialsFD reads and closes fd, which must be a regular file
// with one link (a hard link could stand for any file on the filesystem).
func readCredentialsFD(fd int, uid string) (Credentials, error) {
	f := os.NewFile(uintptr(fd), uid+CredsExt)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Credentials{}, fmt.Errorf("credentials: stat: %w", err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return Credentials{}, errors.New("credentials: not a regular file")
	case st.Nlink != 1:
		return Credentials{}, fmt.Errorf("credentials: %d hard links (refused: want 1)", st.Nlink)
	case st.Size > MaxCredentialsBytes:
		return Credentials{}, fmt.Errorf("credentials: %d bytes (refused unread: at most %d)", st.Size, MaxCredentialsBytes)
	}
	// The size can grow after the stat: read one byte past the bound.
	b, err := io.ReadAll(io.LimitReader(f, MaxCredentialsBytes+1))
	if err != nil {
		return Credentials{}, fmt.Errorf("credentials: read: %w", err)
	}
	if len(b) > MaxCredentialsBytes {
		return Credentials{}, fmt.Errorf("credentials: over %d bytes (refused)", MaxCredentialsBytes)
	}
	return ParseCredentials(b, uid)
}

// MaxCredentialsBytes bounds a credentials file: the flexvolume driver
// writes a few hundred bytes; a bigger file is refused without being read.
const MaxCredentialsBytes = 64 << 10

// maxFieldBytes bounds each field (Kubernetes names are at most 253).
const maxFieldBytes = 253

// ParseCredentials decodes and checks a credentials file's content; uid
// is the file's name without ".json". Errors never quote the content: the
// file may not be what it claims to be.
func ParseCredentials(b []byte, uid string) (Credentials, error) {
	var c Credentials
	if err := json.Unmarshal(b, &c); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return Credentials{}, fmt.Errorf("parse credentials: not valid JSON (syntax error at byte %d of %d)", se.Offset, len(b))
		case errors.As(err, &te) && te.Field != "":
			return Credentials{}, fmt.Errorf("parse credentials: field %s holds a JSON %s, want a string", te.Field, te.Value)
		}
		return Credentials{}, fmt.Errorf("parse credentials: not a JSON object of strings (%d bytes)", len(b))
	}
	if c.UID == "" {
		c.UID = uid
	}
	for _, f := range []struct{ name, v string }{{"uid", c.UID}, {"workload", c.Workload},
		{"namespace", c.Namespace}, {"serviceAccount", c.ServiceAccount}} {
		if err := checkField(f.v); err != nil {
			return Credentials{}, fmt.Errorf("credentials: %s %w", f.name, err)
		}
	}
	switch {
	case c.UID != uid:
		return Credentials{}, errors.New("credentials: the uid inside does not match the file name")
	case c.Workload == "" || c.Namespace == "":
		return Credentials{}, errors.New("credentials: workload and namespace are required")
	case strings.Contains(c.Namespace, "/"):
		return Credentials{}, errors.New("credentials: namespace contains '/'")
	}
	return c, nil
}

// checkField refuses what no Kubernetes name holds and a log line or a
// directory name should not: over maxFieldBytes, invalid UTF-8, control
// characters or white space.
func checkField(v string) error {
	if len(v) > maxFieldBytes {
		return fmt.Errorf("is %d bytes long (at most %d)", len(v), maxFieldBytes)
	}
	if !utf8.ValidString(v) {
		return errors.New("is not valid UTF-8")
	}
	for _, r := range v {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return errors.New("holds a control or white-space character")
		}
	}
	return nil
}
