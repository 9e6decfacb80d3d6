package policysync

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

func TestReadCredentials(t *testing.T) {
	tests := []struct {
		name, uid, json string
		want            model.WorkloadID
		wantErr         string
	}{
		{name: "flexvolume driver (Go field names)", uid: "u1",
			json: `{"UID":"u1","Workload":"web-0","Namespace":"shop","ServiceAccount":"default"}`,
			want: model.WorkloadID{Orchestrator: "k8s", Workload: "shop/web-0", Endpoint: "eth0"}},
		{name: "lower camel case", uid: "u2",
			json: `{"uid":"u2","workload":"db","namespace":"shop","serviceAccount":"sa"}`,
			want: model.WorkloadID{Orchestrator: "k8s", Workload: "shop/db", Endpoint: "eth0"}},
		{name: "uid from the file name", uid: "u3", json: `{"workload":"w","namespace":"n"}`,
			want: model.WorkloadID{Orchestrator: "k8s", Workload: "n/w", Endpoint: "eth0"}},
		{name: "uid mismatch", uid: "u4", json: `{"uid":"other","workload":"w","namespace":"n"}`, wantErr: "does not match"},
		{name: "no namespace", uid: "u5", json: `{"workload":"w"}`, wantErr: "required"},
		{name: "not json", uid: "u6", json: `{`, wantErr: "parse"},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.uid+".json")
			if err := os.WriteFile(path, []byte(tt.json), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := ReadCredentials(path, tt.uid)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || c.WorkloadID() != tt.want || c.UID != tt.uid {
				t.Fatalf("got %+v (%v), want %v", c, err, tt.want)
			}
		})
	}
}

// TestParseCredentialsQuotesNoContent: whatever the file holds, the error
// names a position or a field, never the bytes (a file may stand for
// another one).
func TestParseCredentialsQuotesNoContent(t *testing.T) {
	for _, in := range []string{
		"Zecret root password",
		`{"uid": "u", "workload": 7}`,
		`{"workload":"w","namespace":"n"} Zecret`,
		`["Zecret"]`,
		`{"uid":"Zecret","workload":"w","namespace":"n"}`,
		`{"workload":"w","namespace":"Zec/ret"}`,
		"{\"workload\":\"w\\nZ\",\"namespace\":\"n\"}",
	} {
		_, err := ParseCredentials([]byte(in), "u")
		if err == nil {
			t.Fatalf("%q parsed", in)
		}
		if strings.Contains(err.Error(), "Z") || strings.Contains(err.Error(), "ret") {
			t.Errorf("%q: error %q quotes the content", in, err)
		}
	}
}
