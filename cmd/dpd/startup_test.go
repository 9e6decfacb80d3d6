package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
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

func TestVersionFlag(t *testing.T) {
	c, err := parseFlags([]string{"--version"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code, done := c.Start.act(&out, &errOut)
	if !done || code != 0 {
		t.Fatalf("--version: act = %d, %v", code, done)
	}
	if got := out.String(); !strings.HasPrefix(got, "dpd "+version+" (commit ") || !strings.Contains(got, "go1.") {
		t.Errorf("--version printed %q", got)
	}
	if _, done := (startFlags{}).act(&out, &errOut); done {
		t.Errorf("without start-up flags act did something")
	}
}

func TestInstallTo(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "sub", "dpd")
	var out, errOut bytes.Buffer
	if code, done := (startFlags{InstallTo: dst}).act(&out, &errOut); !done || code != 0 {
		t.Fatalf("--install-to: act = %d, %v: %s", code, done, errOut.String())
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("installed copy differs from the binary (%d vs %d bytes)", len(got), len(want))
	}
	if st, err := os.Stat(dst); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("installed mode = %v, %v; want 0755", st.Mode(), err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".dpd-install-*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	// A destination that cannot be written is an error, exit code 1.
	if code, done := (startFlags{InstallTo: "/proc/dpd-cannot-install/dpd"}).act(&out, &errOut); !done || code != 1 {
		t.Errorf("unwritable --install-to: act = %d, %v", code, done)
	}
}
