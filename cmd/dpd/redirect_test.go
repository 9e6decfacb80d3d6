package main

import (
	"bytes"
	"testing"
)

func TestWorkloadRedirectFlag(t *testing.T) {
	cases := []struct {
		args         []string
		env          map[string]string
		wantStack    bool
		wantHostSide bool
	}{
		{nil, nil, false, false},
		{[]string{"--workload-redirect=false"}, nil, true, false},
		{nil, map[string]string{"DPD_WORKLOAD_REDIRECT": "false"}, true, false},
		{[]string{"--workload-redirect=true"}, map[string]string{"DPD_WORKLOAD_REDIRECT": "false"}, false, false},
		{[]string{"--workload-redirect-peer=false"}, nil, false, true},
		{nil, map[string]string{"DPD_WORKLOAD_REDIRECT_PEER": "false"}, false, true},
	}
	for _, c := range cases {
		got, err := parseFlags(c.args, func(k string) string { return c.env[k] }, &bytes.Buffer{})
		if err != nil {
			t.Errorf("%v %v: %v", c.args, c.env, err)
			continue
		}
		if got.Linux.StackForwarding != c.wantStack {
			t.Errorf("%v %v: stack forwarding %v, want %v", c.args, c.env, got.Linux.StackForwarding, c.wantStack)
		}
		if got.Linux.HostSideDelivery != c.wantHostSide {
			t.Errorf("%v %v: host-side delivery %v, want %v", c.args, c.env, got.Linux.HostSideDelivery, c.wantHostSide)
		}
	}
}
