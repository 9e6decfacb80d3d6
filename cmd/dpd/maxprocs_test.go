package main

import (
	"io"
	"testing"
)

func TestMaxProcsFlag(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		cpus      int
		want      int
		wantApply bool
	}{
		{name: "default: twice the CPUs", cpus: 2, want: 4, wantApply: true},
		{name: "default on one CPU", cpus: 1, want: 2, wantApply: true},
		{name: "default bounded", cpus: 4096, want: maxProcsLimit, wantApply: true},
		{name: "flag", args: []string{"--max-procs=3"}, cpus: 2, want: 3, wantApply: true},
		{name: "flag 0 is the default", args: []string{"--max-procs=0"}, cpus: 8, want: 16, wantApply: true},
		{name: "environment twin", env: map[string]string{"DPD_MAX_PROCS": "6"}, cpus: 2, want: 6, wantApply: true},
		{name: "GOMAXPROCS stands", env: map[string]string{"GOMAXPROCS": "1"}, cpus: 2},
		{name: "flag over GOMAXPROCS", args: []string{"--max-procs=5"}, env: map[string]string{"GOMAXPROCS": "1"}, cpus: 2, want: 5, wantApply: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			c, err := parseFlags(tt.args, getenv, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			got, apply := procsTarget(c.MaxProcs, getenv, tt.cpus)
			if got != tt.want || apply != tt.wantApply {
				t.Errorf("procsTarget = %d %v, want %d %v", got, apply, tt.want, tt.wantApply)
			}
		})
	}
	for _, bad := range []string{"-1", "1025", "many", ""} {
		if _, err := parseFlags([]string{"--max-procs=" + bad}, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("--max-procs=%q accepted", bad)
		}
	}
}
