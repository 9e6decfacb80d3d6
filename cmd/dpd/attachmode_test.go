package main

import (
	"bytes"
	"testing"
)

func TestAttachModeFlag(t *testing.T) {
	cases := []struct {
		args    []string
		env     map[string]string
		want    string
		wantErr bool
	}{
		{nil, nil, "auto", false},
		{[]string{"--attach-mode=tc"}, nil, "tc", false},
		{[]string{"--attach-mode=tcx"}, nil, "tcx", false},
		{nil, map[string]string{"DPD_ATTACH_MODE": "tc"}, "tc", false},
		{[]string{"--force-legacy-tc"}, nil, "tc", false},
		{[]string{"--force-legacy-tc", "--attach-mode=tcx"}, nil, "", true},
		{[]string{"--attach-mode=xdp"}, nil, "", true},
	}
	for _, c := range cases {
		got, err := parseFlags(c.args, func(k string) string { return c.env[k] }, &bytes.Buffer{})
		if (err != nil) != c.wantErr {
			t.Errorf("%v %v: err = %v, want error %v", c.args, c.env, err, c.wantErr)
			continue
		}
		if err == nil && got.Linux.AttachMode != c.want {
			t.Errorf("%v %v: attach mode %q, want %q", c.args, c.env, got.Linux.AttachMode, c.want)
		}
	}
}

// TestActionFlagsHaveNoEnvTwin: an environment variable must never turn
// a start into a one-shot action, nor fail it.
func TestActionFlagsHaveNoEnvTwin(t *testing.T) {
	env := map[string]string{"DPD_VERSION": "1.2.3", "DPD_INSTALL_TO": "/tmp/x"}
	if _, err := parseFlags(nil, func(k string) string { return env[k] }, &bytes.Buffer{}); err != nil {
		t.Fatalf("DPD_VERSION/DPD_INSTALL_TO broke the start: %v", err)
	}
}
