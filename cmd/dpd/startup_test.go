package main

import (
	"io"
	"testing"
)

func TestAllowPrivateBPFFSFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want bool
	}{
		{want: false},
		{args: []string{"--allow-private-bpffs"}, want: true},
		{env: map[string]string{"DPD_ALLOW_PRIVATE_BPFFS": "1"}, want: true},
		{args: []string{"--allow-private-bpffs=false"}, env: map[string]string{"DPD_ALLOW_PRIVATE_BPFFS": "true"}, want: false},
	} {
		c, err := parseFlags(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
		if err != nil {
			t.Fatalf("%v %v: %v", tt.args, tt.env, err)
		}
		if c.Start.AllowPrivateBPFFS != tt.want {
			t.Errorf("%v %v: AllowPrivateBPFFS = %v, want %v", tt.args, tt.env, c.Start.AllowPrivateBPFFS, tt.want)
		}
	}
}
