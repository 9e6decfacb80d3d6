package main

import (
	"io"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
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
	checkRuntimeFlag(t, "memory-limit", []runtimeFlagCase[int64]{
		{name: "default", want: defaultMemoryLimit, wantApply: true},
		{name: "flag", args: []string{"--memory-limit=64MiB"}, want: 64 << 20, wantApply: true},
		{name: "environment twin", env: map[string]string{"DPD_MEMORY_LIMIT": "1GiB"}, want: 1 << 30, wantApply: true},
		{name: "flag wins", args: []string{"--memory-limit=32MiB"}, env: map[string]string{"DPD_MEMORY_LIMIT": "1GiB"},
			want: 32 << 20, wantApply: true},
		{name: "zero disables", args: []string{"--memory-limit=0"}, want: math.MaxInt64, wantApply: true},
		{name: "GOMEMLIMIT stands", env: map[string]string{"GOMEMLIMIT": "100MiB"}},
		{name: "flag over GOMEMLIMIT", args: []string{"--memory-limit=off"}, env: map[string]string{"GOMEMLIMIT": "100MiB"},
			want: math.MaxInt64, wantApply: true},
	}, []string{"48MB"}, func(c config, getenv func(string) string) (int64, bool) { return memoryLimit(c.MemoryLimit, getenv) })
}

func TestGCPercentFlag(t *testing.T) {
	checkRuntimeFlag(t, "gc-percent", []runtimeFlagCase[int]{
		{name: "default", want: defaultGCPercent, wantApply: true},
		{name: "flag", args: []string{"--gc-percent=100"}, want: 100, wantApply: true},
		{name: "environment twin", env: map[string]string{"DPD_GC_PERCENT": "200"}, want: 200, wantApply: true},
		{name: "off", args: []string{"--gc-percent=-1"}, want: -1, wantApply: true},
		{name: "GOGC stands", env: map[string]string{"GOGC": "80"}},
		{name: "flag over GOGC", args: []string{"--gc-percent=70"}, env: map[string]string{"GOGC": "80"}, want: 70, wantApply: true},
	}, []string{"0", "-2", "half"}, func(c config, getenv func(string) string) (int, bool) { return gcTarget(c.GCPercent, getenv) })
}

// runtimeFlagCase is a command line and environment for one of the Go
// runtime's settings and the value dpd gives it; wantApply false: the
// runtime's own variable stands.
type runtimeFlagCase[T comparable] struct {
	name      string
	args      []string
	env       map[string]string
	want      T
	wantApply bool
}

// checkRuntimeFlag parses each case and checks what target makes of it,
// then that --flag refuses each value of bad.
func checkRuntimeFlag[T comparable](t *testing.T, flag string, cases []runtimeFlagCase[T], bad []string,
	target func(c config, getenv func(string) string) (T, bool)) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			c, err := parseFlags(tt.args, getenv, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			got, apply := target(c, getenv)
			if got != tt.want || apply != tt.wantApply {
				t.Errorf("--%s: got %v %v, want %v %v", flag, got, apply, tt.want, tt.wantApply)
			}
		})
	}
	for _, b := range bad {
		if _, err := parseFlags([]string{"--" + flag + "=" + b}, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("--%s=%q accepted", flag, b)
		}
	}
}

// A soft limit the live heap has outgrown is lifted, with a warning.
func TestGuardMemoryLimitLifts(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	ballast := make([]byte, 8<<20)
	const limit = 4 << 20 // below the live heap the ballast keeps
	debug.SetMemoryLimit(limit)
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&syncWriter{w: &logged}, nil))
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		guardMemoryLimit(limit, false, 5*time.Millisecond, log, stop)
	}()
	runtime.GC()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		close(stop)
		t.Fatal("the limit was not lifted")
	}
	runtime.KeepAlive(ballast)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("memory limit after the guard = %d, want none", got)
	}
	if !strings.Contains(logged.String(), "outgrew the soft memory limit") {
		t.Errorf("no warning logged: %q", logged.String())
	}
}

// A limit the heap stays well under is kept until stop.
func TestGuardMemoryLimitKeeps(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	const limit = 1 << 40
	debug.SetMemoryLimit(limit)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		guardMemoryLimit(limit, false, time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)), stop)
	}()
	runtime.GC()
	close(stop)
	<-done
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("memory limit = %d, want %d kept", got, limit)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// With the collector off the limit is raised, never lifted.
func TestGuardMemoryLimitRaisesWhenGCOff(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	ballast := make([]byte, 8<<20)
	const limit = 4 << 20
	debug.SetMemoryLimit(limit)
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&syncWriter{w: &logged}, nil))
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		guardMemoryLimit(limit, true, 5*time.Millisecond, log, stop)
	}()
	runtime.GC()
	deadline := time.Now().Add(30 * time.Second)
	for debug.SetMemoryLimit(-1) == limit && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	close(stop)
	<-done
	runtime.KeepAlive(ballast)
	got := debug.SetMemoryLimit(-1)
	if got == limit || got == math.MaxInt64 {
		t.Errorf("memory limit with GC off = %d, want it raised, not kept or lifted", got)
	}
	if !strings.Contains(logged.String(), "raised it") {
		t.Errorf("no warning logged: %q", logged.String())
	}
}

func TestGCIsOff(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if !gcIsOff(gcPercent{n: -1, set: true}, env(nil)) {
		t.Error("--gc-percent=-1 is not off")
	}
	if !gcIsOff(gcPercent{n: 50}, env(map[string]string{"GOGC": "off"})) {
		t.Error("GOGC=off standing is not off")
	}
	if gcIsOff(gcPercent{n: 50, set: true}, env(map[string]string{"GOGC": "off"})) {
		t.Error("--gc-percent=50 over GOGC=off is off")
	}
	if gcIsOff(gcPercent{n: 50}, env(nil)) {
		t.Error("the default is off")
	}
}
