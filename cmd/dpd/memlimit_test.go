package main

import (
	"io"
	"math"
	"testing"
)

func TestMemorySizeSet(t *testing.T) {
	for in, want := range map[string]int64{
		"48MiB": 48 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "2TiB": 2 << 40,
		"1000": 1000, "1000B": 1000, "0": 0, "off": 0, "0MiB": 0,
	} {
		var m memorySize
		if err := m.Set(in); err != nil || m.bytes != want || !m.set {
			t.Errorf("Set(%q) = %d %v set=%v, want %d", in, m.bytes, err, m.set, want)
		}
	}
	for _, in := range []string{"", "48MB", "48 MiB", "-1", "1.5GiB", "MiB", "9999999TiB", "lots"} {
		var m memorySize
		if err := m.Set(in); err == nil {
			t.Errorf("Set(%q) = %d, want an error", in, m.bytes)
		}
	}
	for _, s := range []string{"48MiB", "1GiB", "1000", "0", "1536KiB"} {
		var m memorySize
		if err := m.Set(s); err != nil || m.String() != s {
			t.Errorf("String after Set(%q) = %q (%v)", s, m.String(), err)
		}
	}
}

func TestMemoryLimitFlag(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		want      int64
		wantApply bool
	}{
		{name: "default", want: defaultMemoryLimit, wantApply: true},
		{name: "flag", args: []string{"--memory-limit=64MiB"}, want: 64 << 20, wantApply: true},
		{name: "environment twin", env: map[string]string{"DPD_MEMORY_LIMIT": "1GiB"}, want: 1 << 30, wantApply: true},
		{name: "flag wins", args: []string{"--memory-limit=32MiB"}, env: map[string]string{"DPD_MEMORY_LIMIT": "1GiB"},
			want: 32 << 20, wantApply: true},
		{name: "zero disables", args: []string{"--memory-limit=0"}, want: math.MaxInt64, wantApply: true},
		{name: "GOMEMLIMIT stands", env: map[string]string{"GOMEMLIMIT": "100MiB"}},
		{name: "flag over GOMEMLIMIT", args: []string{"--memory-limit=off"}, env: map[string]string{"GOMEMLIMIT": "100MiB"},
			want: math.MaxInt64, wantApply: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			c, err := parseFlags(tt.args, getenv, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			got, apply := memoryLimit(c.MemoryLimit, getenv)
			if got != tt.want || apply != tt.wantApply {
				t.Errorf("memoryLimit = %d %v, want %d %v", got, apply, tt.want, tt.wantApply)
			}
		})
	}
	if _, err := parseFlags([]string{"--memory-limit=48MB"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("--memory-limit=48MB accepted")
	}
}
