package policysync

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

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
// name without ".json" and must match a uid inside, if one is given.
func ReadCredentials(path, uid string) (Credentials, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Credentials{}, fmt.Errorf("read credentials: %w", err)
	}
	var c Credentials
	if err := json.Unmarshal(b, &c); err != nil {
		return Credentials{}, fmt.Errorf("parse credentials %s: %w", path, err)
	}
	if c.UID == "" {
		c.UID = uid
	}
	switch {
	case c.UID != uid:
		return c, fmt.Errorf("credentials %s: uid %q does not match the file name", path, c.UID)
	case c.Workload == "" || c.Namespace == "":
		return c, fmt.Errorf("credentials %s: workload and namespace are required", path)
	case strings.Contains(c.Namespace, "/"):
		return c, errors.New("credentials " + path + ": namespace contains '/'")
	}
	return c, nil
}
