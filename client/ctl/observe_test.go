package ctl

import (
	"testing"
	"time"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if got, err := parseSince("5m", now); err != nil || !got.Equal(now.Add(-5*time.Minute)) {
		t.Fatalf("5m: %v %v", got, err)
	}
	if got, err := parseSince("2026-12-01T09:00:00Z", now); err != nil || got.Hour() != 9 {
		t.Fatalf("rfc3339: %v %v", got, err)
	}
	if _, err := parseSince("yesterday", now); err == nil {
		t.Fatal("bad since accepted")
	}
}
