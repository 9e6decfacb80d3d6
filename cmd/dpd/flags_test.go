package main

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/server"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c server.Config, level slog.Level)
		wantErr string
	}{
		{
			name: "defaults",
			check: func(t *testing.T, c server.Config, level slog.Level) {
				want := server.Config{Socket: "/run/dpd/dpd.sock", MetricsAddr: "127.0.0.1:9091", Dataplane: "linux", MaxRecvMsgSize: 16 << 20, RuleMetricsLimit: 100, PolicySyncMaxWorkloads: 1024, MaxPendingStatuses: 16384, FlowLogInterval: time.Minute}
				if c != want || level != slog.LevelInfo {
					t.Errorf("defaults = %+v %v", c, level)
				}
			},
		},
		{
			name: "environment",
			env: map[string]string{"DPD_SOCKET": "/tmp/x.sock", "DPD_DATAPLANE": "memory", "DPD_LOG_LEVEL": "debug",
				"DPD_MAX_MSG_SIZE": "1024", "DPD_LISTEN_TCP": "127.0.0.1:9443", "DPD_INSECURE_TCP": "true",
				"DPD_POLICYSYNC_MAX_WORKLOADS": "7"},
			check: func(t *testing.T, c server.Config, level slog.Level) {
				want := server.Config{Socket: "/tmp/x.sock", ListenTCP: "127.0.0.1:9443", InsecureTCP: true, MetricsAddr: "127.0.0.1:9091", Dataplane: "memory", MaxRecvMsgSize: 1024, RuleMetricsLimit: 100, PolicySyncMaxWorkloads: 7, MaxPendingStatuses: 16384, FlowLogInterval: time.Minute}
				if c != want || level != slog.LevelDebug {
					t.Errorf("env = %+v %v", c, level)
				}
			},
		},
		{
			name: "flag wins over environment",
			args: []string{"--socket=/tmp/flag.sock", "--dataplane", "linux", "--log-level=warn"},
			env:  map[string]string{"DPD_SOCKET": "/tmp/env.sock", "DPD_DATAPLANE": "memory", "DPD_LOG_LEVEL": "debug"},
			check: func(t *testing.T, c server.Config, level slog.Level) {
				if c.Socket != "/tmp/flag.sock" || c.Dataplane != "linux" || level != slog.LevelWarn {
					t.Errorf("flag vs env = %+v %v", c, level)
				}
			},
		},
		{
			name:    "mtls needs all three files",
			args:    []string{"--listen-tcp=:9443", "--tls-cert=c", "--tls-key=k"},
			wantErr: "--tls-client-ca",
		},
		{
			name: "mtls complete",
			args: []string{"--listen-tcp=:9443", "--tls-cert=c", "--tls-key=k", "--tls-client-ca=ca"},
			check: func(t *testing.T, c server.Config, _ slog.Level) {
				if c.ListenTCP != ":9443" || c.TLSClientCA != "ca" || c.InsecureTCP {
					t.Errorf("mtls = %+v", c)
				}
			},
		},
		{name: "bad env value names the variable", env: map[string]string{"DPD_MAX_MSG_SIZE": "lots"}, wantErr: "DPD_MAX_MSG_SIZE"},
		{name: "bad log level", args: []string{"--log-level=loud"}, wantErr: "log-level"},
		{name: "unknown dataplane", args: []string{"--dataplane=xdp"}, wantErr: "linux or memory"},
		{name: "non-positive message size", args: []string{"--max-msg-size=0"}, wantErr: "positive"},
		{name: "insecure without tcp", args: []string{"--insecure-tcp"}, wantErr: "need --listen-tcp"},
		{name: "stray argument", args: []string{"serve"}, wantErr: "unexpected arguments"},
		{
			// Felix execs its driver without arguments: the environment alone
			// selects pipe mode.
			name: "felix pipe from the environment",
			env:  map[string]string{"DPD_FELIX_PIPE": "1", "DPD_POLICYSYNC_DIR": "/var/run/nodeagent"},
			check: func(t *testing.T, c server.Config, _ slog.Level) {
				if !c.FelixPipe || c.PolicySyncDir != "/var/run/nodeagent" {
					t.Errorf("pipe env = %+v", c)
				}
			},
		},
		{
			name: "rule metrics",
			args: []string{"--rule-metrics", "--rule-metrics-limit=20"},
			check: func(t *testing.T, c server.Config, _ slog.Level) {
				if !c.RuleMetrics || c.RuleMetricsLimit != 20 {
					t.Errorf("rule metrics = %+v", c)
				}
			},
		},
		{name: "flow log needs flow events", args: []string{"--flow-events=false", "--flow-log=-"}, wantErr: "--flow-log needs --flow-events"},
		{name: "non-positive flow history", args: []string{"--flow-history=0"}, wantErr: "flow-history"},
		{name: "non-positive flow log interval", args: []string{"--flow-log-interval=0s"}, wantErr: "flow-log-interval"},
		{name: "non-positive rule limit", args: []string{"--rule-metrics-limit=0"}, wantErr: "rule-metrics-limit"},
		{name: "non-positive workload cap", args: []string{"--policysync-max-workloads=0"}, wantErr: "policysync-max-workloads"},
		{name: "non-positive status cap", args: []string{"--max-pending-statuses=0"}, wantErr: "max-pending-statuses"},
		{name: "unknown policy-sync encoding", args: []string{"--policysync-encoding=v2"}, wantErr: "policy-sync encoding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c.Config, c.Level)
		})
	}
}

func TestEnvName(t *testing.T) {
	for flagName, want := range map[string]string{"socket": "DPD_SOCKET", "tls-client-ca": "DPD_TLS_CLIENT_CA", "max-msg-size": "DPD_MAX_MSG_SIZE"} {
		if got := envName(flagName); got != want {
			t.Errorf("envName(%q) = %q, want %q", flagName, got, want)
		}
	}
}
