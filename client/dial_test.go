package client

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	abs, err := filepath.Abs("dpd.sock")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		target, want string
		unix         bool
		wantErr      bool
	}{
		{target: "unix:///run/dpd/dpd.sock", want: "unix:///run/dpd/dpd.sock", unix: true},
		{target: "/run/dpd/dpd.sock", want: "unix:///run/dpd/dpd.sock", unix: true},
		{target: "dpd.sock", want: "unix://" + abs, unix: true},
		{target: "node1:9443", want: "node1:9443"},
		{target: "[::1]:9443", want: "[::1]:9443"},
		{target: "", wantErr: true},
	}
	for _, tt := range tests {
		got, unix, err := parseTarget(tt.target)
		if (err != nil) != tt.wantErr || got != tt.want || unix != tt.unix {
			t.Errorf("parseTarget(%q) = %q, %v, %v; want %q, %v, err %v", tt.target, got, unix, err, tt.want, tt.unix, tt.wantErr)
		}
	}
}

func TestDialRefusesUnsafeCombinations(t *testing.T) {
	tests := []struct {
		name, target string
		opts         []Option
		want         string
	}{
		{"tcp needs tls or insecure", "node1:9443", nil, "needs WithTLS"},
		{"tls on a unix socket", "/run/dpd/dpd.sock", []Option{WithTLS("c", "k", "ca")}, "TLS is for TCP"},
		{"tls and insecure", "node1:9443", []Option{WithTLS("c", "k", "ca"), WithInsecure()}, "exclusive"},
		{"missing key pair", "node1:9443", []Option{WithTLS("/nonexistent/c", "/nonexistent/k", "ca")}, "key pair"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Dial(context.Background(), tt.target, tt.opts...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Dial = %v, want error containing %q", err, tt.want)
			}
		})
	}
}
