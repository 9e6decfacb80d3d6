package hostile_test

import (
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// Scrape cost bounds: a scrape reports what dpd tracks, so its size does
// not depend on how many members a set has (scrapeGrowth allows for
// histogram buckets that fill while the set is replaced), and a burst of
// idleScrapes costs the daemon at most scrapeTicks clock ticks of CPU
// (10 ms each: 10 ms a scrape, counting the collections its garbage
// brings on a heap of 2M members; a scrape that walked the members would
// take seconds) both before and after the replacement.
const (
	idleScrapes  = 100
	scrapeTicks  = 100
	scrapeGrowth = 4 << 10
)

// scrapeCost is what a burst of idleScrapes cost the daemon.
type scrapeCost struct{ ticks, size int }

func scrapeBurst(t *testing.T, d *daemon) scrapeCost {
	t.Helper()
	var c scrapeCost
	t0 := d.cpuTicks(t)
	for range idleScrapes {
		code, body := d.get("/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d %.200s", code, body)
		}
		c.size = max(c.size, len(body))
	}
	c.ticks = d.cpuTicks(t) - t0
	return c
}

// metricsWhileReplaced: /metrics scraped in a loop while the 2M-member set
// is replaced by 2M others answers every time, at a size that does not
// grow, and a burst of scrapes after costs what one before the set was
// programmed did, within the bound.
func metricsWhileReplaced(t *testing.T, d *daemon, c *liveController, conn *grpc.ClientConn, before scrapeCost) {
	ic := dpdv1.NewInspectClient(conn)
	msgs := bigSetMessages(1)
	replaced := make(chan struct{})
	go func() {
		defer close(replaced)
		for _, m := range msgs {
			if c.st.SendMsg(m) != nil {
				return // the controller's end is checked below
			}
		}
		for {
			resp, err := ic.ListIPSets(t.Context(), &dpdv1.ListIPSetsRequest{Id: bigSetID, MaxMembers: 1})
			if err != nil {
				return
			}
			if s := resp.GetIpSets()[0]; s.GetMemberCount() == bigSetMembers && s.GetMembers()[0] == bigSetMember(1, 0) {
				return
			}
		}
	}()
	scrapes, largestDuring := 0, 0
	for running := true; running; scrapes++ {
		select {
		case <-replaced:
			running = false
		case <-t.Context().Done():
			return
		default:
		}
		code, body := d.get("/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics during the replacement: %d %.200s", code, body)
		}
		largestDuring = max(largestDuring, len(body))
	}
	if n := setCount(t, ic, bigSetID); n != bigSetMembers {
		t.Fatalf("after the replacement the set has %d members, want %d", n, bigSetMembers)
	}
	// The engine's apply of the new members (and the collection of the old
	// ones) may still run after the set reads replaced; what a scrape costs
	// is measured once the daemon is idle again.
	waitIdle(t, d)
	after := scrapeBurst(t, d)
	t.Logf("%d scrapes before the set: %d ticks, largest %d bytes; %d scrapes during the replacement of 2M members: largest %d bytes; %d scrapes after: %d ticks, largest %d bytes (bounds: %d ticks, +%d bytes)",
		idleScrapes, before.ticks, before.size, scrapes, largestDuring, idleScrapes, after.ticks, after.size, scrapeTicks, scrapeGrowth)
	if before.ticks > scrapeTicks || after.ticks > scrapeTicks {
		t.Errorf("%d scrapes cost %d ticks before, %d after; bound %d", idleScrapes, before.ticks, after.ticks, scrapeTicks)
	}
	if max(largestDuring, after.size) > before.size+scrapeGrowth {
		t.Errorf("scrapes grew from %d bytes to %d during and %d after; bound +%d", before.size, largestDuring, after.size, scrapeGrowth)
	}
	d.answers(t)
	checkUp(t, d, "web")
}

// Idle: a daemon that used at most idleTicks clock ticks of CPU over
// idleWindow. waitIdle fails t if it is not idle within idleDeadline.
const (
	idleWindow   = 200 * time.Millisecond
	idleTicks    = 2
	idleDeadline = 60 * time.Second
)

func waitIdle(t *testing.T, d *daemon) {
	t.Helper()
	deadline := time.Now().Add(idleDeadline)
	for {
		t0 := d.cpuTicks(t)
		time.Sleep(idleWindow) // a measurement window, not a wait for a condition
		used := d.cpuTicks(t) - t0
		if used <= idleTicks {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dpd still busy after %s (%d ticks in the last %s)", idleDeadline, used, idleWindow)
		}
	}
}
