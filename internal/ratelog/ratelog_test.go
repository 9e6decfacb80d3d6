package ratelog_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/internal/ratelog"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// syncBuffer is a bytes.Buffer safe for the summary timer's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSpace(s.b.String()), "\n")
}

func newLogger(opts ratelog.Options) (*slog.Logger, *ratelog.Handler, *syncBuffer) {
	buf := &syncBuffer{}
	h := ratelog.New(slog.NewTextHandler(buf, nil), opts)
	return slog.New(h), h, buf
}

func TestFloodCostsBurstPlusSummary(t *testing.T) {
	suppressed := 0
	log, h, buf := newLogger(ratelog.Options{Interval: time.Hour, Burst: 3, OnSuppress: func(string) { suppressed++ }})
	for i := range 100000 {
		log.Warn("bad frame", "n", i)
	}
	log.Info("info always passes")
	log.Warn("other warning")
	h.Flush()
	lines := buf.lines()
	// 3 of the flood, the info, the other warning, one summary.
	if len(lines) != 6 {
		t.Fatalf("%d lines:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	last := lines[len(lines)-1]
	if !strings.Contains(last, ratelog.SummaryMessage) || !strings.Contains(last, "suppressed=99997") || !strings.Contains(last, `repeated="bad frame"`) {
		t.Fatalf("summary %q", last)
	}
	if suppressed != 99997 {
		t.Fatalf("OnSuppress saw %d", suppressed)
	}
	// After the flush the kind starts afresh.
	log.Warn("bad frame")
	if got := len(buf.lines()); got != 7 {
		t.Fatalf("after flush: %d lines", got)
	}
}

func TestExplicitKeysAndDerivedHandlersShareBudgets(t *testing.T) {
	log, h, buf := newLogger(ratelog.Options{Interval: time.Hour, Burst: 1})
	a := log.With("component", "a")
	for range 10 {
		a.Warn("file refused", ratelog.Key("symlink"), "uid", "u")
		log.Warn("file refused", ratelog.Key("symlink"))
		log.Warn("file refused", ratelog.Key("parse"))
	}
	h.Flush()
	lines := buf.lines()
	if len(lines) != 4 { // one per kind, two summaries
		t.Fatalf("%d lines:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if strings.Contains(l, ratelog.KeyAttr) {
			t.Fatalf("key attribute written: %q", l)
		}
	}
	if !strings.Contains(lines[0], "component=a") || !strings.Contains(lines[0], "uid=u") {
		t.Fatalf("attributes lost: %q", lines[0])
	}
}

func TestKindsAreBounded(t *testing.T) {
	log, h, buf := newLogger(ratelog.Options{Interval: time.Hour, Burst: 1, MaxKeys: 10})
	for i := range 1000 {
		log.Warn("refused", ratelog.Key(strings.Repeat("k", i%500+1)))
	}
	h.Flush()
	// 10 kinds pass once each, the overflow kind once, and summaries.
	if n := len(buf.lines()); n > 10+1+11 {
		t.Fatalf("%d lines for 1000 records of 500 kinds with MaxKeys 10", n)
	}
}

func TestSummaryArrivesAtIntervalEnd(t *testing.T) {
	log, _, buf := newLogger(ratelog.Options{Interval: 20 * time.Millisecond, Burst: 1})
	for range 50 {
		log.Warn("flood")
	}
	testutil.WaitFor(t, 5*time.Second, "summary line", func() bool {
		return strings.Contains(strings.Join(buf.lines(), "\n"), "suppressed=49")
	})
}

func TestMessagesLimitsOnlyThose(t *testing.T) {
	log, h, buf := newLogger(ratelog.Options{Interval: time.Hour, Burst: 1, Messages: []string{"flood"}})
	for range 10 {
		log.Warn("flood")
		log.Warn("apply failed")
	}
	h.Flush()
	if n := len(buf.lines()); n != 1+10+1 {
		t.Fatalf("%d lines, want 1 flood, 10 others, 1 summary:\n%s", n, strings.Join(buf.lines(), "\n"))
	}
}
