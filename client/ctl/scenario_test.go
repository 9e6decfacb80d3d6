package ctl

import (
	"strings"
	"testing"
)

func TestParseScenario(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string // payload kinds
		wantErr    string
	}{
		{
			name: "yaml list, JSON names",
			text: "- ipsetUpdate: {id: s1, members: [10.0.0.1]}\n- inSync: {}\n",
			want: []string{"ipset_update", "in_sync"},
		},
		{
			name: "messages object, proto names",
			text: "messages:\n  - workload_endpoint_remove: {id: {orchestrator_id: k8s, workload_id: w, endpoint_id: eth0}}\n",
			want: []string{"workload_endpoint_remove"},
		},
		{
			name: "json",
			text: `{"messages": [{"configUpdate": {"config": {"InterfacePrefix": "cali"}}}]}`,
			want: []string{"config_update"},
		},
		{name: "unknown field", text: "- ipsetUpdate: {id: s1, membrs: [a]}\n", wantErr: "message 1"},
		{name: "no payload", text: "- sequenceNumber: 3\n", wantErr: "no payload"},
		{name: "not a list", text: "ipsetUpdate: {id: s1}\n", wantErr: "want a list"},
		{name: "bad yaml", text: "- [\n", wantErr: "parse yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs, err := ParseScenario([]byte(tt.text))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range msgs {
				fd := m.ProtoReflect().WhichOneof(m.ProtoReflect().Descriptor().Oneofs().ByName("payload"))
				got = append(got, string(fd.Name()))
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("kinds = %v, want %v", got, tt.want)
			}
		})
	}
}
