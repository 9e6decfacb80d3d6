package main

import (
	"bytes"
	"testing"
)

func TestWorkloadRedirectFlag(t *testing.T) {
	cases := []struct {
		args      []string
		env       map[string]string
		wantStack bool
	}{
		{nil, nil, false},
		{[]string{"--workload-redirect=false"}, nil, true},
		{nil, map[string]string{"DPD_WORKLOAD_REDIRECT": "false"}, true},
		{[]string{"--workload-redirect=true"}, map[string]string{"DPD_WORKLOAD_REDIRECT": "false"}, false},
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
	}
}
