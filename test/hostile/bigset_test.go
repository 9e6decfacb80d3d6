package hostile_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

// bigSetMembers is the size of the IP set the bounded-answer cases
// program, bigSetChunk how many members one message carries (a 2M-member
// IPSetUpdate would pass the 16 MiB message limit).
const (
	bigSetID      = "s:big"
	bigSetMembers = 2_000_000
	bigSetChunk   = 250_000
)

// appendMember appends member i of a big set of generation gen:
// 10.0.0.0 on for generation 0, 11.0.0.0 on for 1.
func appendMember(b []byte, gen, i int) []byte {
	i += gen << 24
	for shift := 24; shift >= 0; shift -= 8 {
		octet := i >> shift & 255
		if shift == 24 {
			octet += 10
		}
		b = strconv.AppendInt(b, int64(octet), 10)
		if shift > 0 {
			b = append(b, '.')
		}
	}
	return b
}

func bigSetMember(gen, i int) string { return string(appendMember(nil, gen, i)) }

// bigSetMessages replace bigSetID with members of generation gen: one
// IPSetUpdate (ToDataplane field 2), then IPSetDeltaUpdates (field 3)
// adding the rest; members are field 2 of both. Encoded here rather than
// marshalled: 2M strings through the protobuf library cost the test more
// than the daemon.
func bigSetMessages(gen int) []rawBytes {
	var msgs []rawBytes
	var member []byte
	for start := 0; start < bigSetMembers; start += bigSetChunk {
		set := protowire.AppendString(protowire.AppendTag(make([]byte, 0, 16*bigSetChunk), 1, protowire.BytesType), bigSetID)
		for i := start; i < start+bigSetChunk; i++ {
			member = appendMember(member[:0], gen, i)
			set = protowire.AppendBytes(protowire.AppendTag(set, 2, protowire.BytesType), member)
		}
		payload := protowire.Number(3)
		if start == 0 {
			payload = 2
		}
		msgs = append(msgs, protowire.AppendBytes(protowire.AppendTag(nil, payload, protowire.BytesType), set))
	}
	return msgs
}

// liveController is a controller session that reads every status: the
// latest status per workload id is kept.
type liveController struct {
	st dpdv1.Dataplane_SyncClient

	mu     sync.Mutex
	status map[string]string
	err    error // why the stream ended
}

func newLiveController(t *testing.T, d *daemon) *liveController {
	t.Helper()
	c := &liveController{st: controller(t, dial(t, d, rawCodec())), status: map[string]string{}}
	go func() {
		for {
			m, err := c.st.Recv()
			c.mu.Lock()
			if err != nil {
				c.err = err
				c.mu.Unlock()
				return
			}
			if u := m.GetWorkloadEndpointStatusUpdate(); u != nil {
				c.status[u.GetId().GetWorkloadId()] = u.GetStatus().GetStatus()
			}
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *liveController) send(t *testing.T, msgs ...*felix.ToDataplane) {
	t.Helper()
	for _, m := range msgs {
		must(t, c.st.Send(m))
	}
}

func (c *liveController) sendRaw(t *testing.T, msgs ...rawBytes) {
	t.Helper()
	for _, m := range msgs {
		must(t, c.st.SendMsg(m))
	}
}

// waitStatus waits until the controller was told workload name is up.
func (c *liveController) waitUp(t *testing.T, name string) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, "the controller told "+name+" is up", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.err != nil {
			t.Fatalf("controller stream ended: %v", c.err)
		}
		return c.status["ns/"+name] == "up"
	})
}

// setCount is the member count Inspect reports for set id (-1: absent).
func setCount(t *testing.T, ic dpdv1.InspectClient, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := ic.ListIPSets(ctx, &dpdv1.ListIPSetsRequest{Id: id})
	if err != nil {
		return -1
	}
	return int(resp.GetIpSets()[0].GetMemberCount())
}

// startBigSet starts dpd with web up, takes a burst of scrapes, and
// programs bigSetID at generation 0.
func startBigSet(t *testing.T) (*daemon, *liveController, *grpc.ClientConn, scrapeCost) {
	t.Helper()
	d := startDaemon(t, nil)
	c := newLiveController(t, d)
	c.send(t, wepUpdate("web", "caliweb", 0), inSync())
	c.waitUp(t, "web")
	before := scrapeBurst(t, d)
	// The client takes answers of any size, so that an unbounded one is
	// measured rather than refused.
	conn := dial(t, d, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	ic := dpdv1.NewInspectClient(conn)
	t0 := time.Now()
	c.sendRaw(t, bigSetMessages(0)...)
	testutil.WaitFor(t, 60*time.Second, "the big set programmed", func() bool { return setCount(t, ic, bigSetID) == bigSetMembers })
	t.Logf("%d members programmed in %v; VmRSS %d MiB VmHWM %d MiB", bigSetMembers, time.Since(t0).Round(time.Millisecond),
		d.procStatus(t, "VmRSS")>>20, d.procStatus(t, "VmHWM")>>20)
	return d, c, conn, before
}

// The bounded-answer case's figures: 20 parallel calls; an answer of at
// most 1,000 members (~15 KB) is under answerBound; the calls may add at
// most callsRSSBound to dpd's resident memory (a build that answers with
// every member held ~400 MiB more).
const (
	parallelCalls = 20
	answerBound   = 64 << 10
	callsRSSBound = 64 << 20
	// bigSetRSSBound: the memory dataplane holds a 2M-member set twice
	// (the engine's members and the memory kernel's copy), ~390 MiB;
	// replacing it by 2M others leaves the old generation's garbage until
	// the collector runs (VmHWM ~580 MiB).
	bigSetRSSBound = 768 << 20
	bigSetLogs     = 40
)

// TestBigIPSet programs a 2M-member IP set once for the cases that need
// one (programming it is most of their cost).
func TestBigIPSet(t *testing.T) {
	d, c, conn, scrapes := startBigSet(t)
	t.Run("ListIPSetsHugeMaxMembers", func(t *testing.T) { listIPSetsHugeMaxMembers(t, d, c, conn) })
	t.Run("MetricsWhileReplaced", func(t *testing.T) { metricsWhileReplaced(t, d, c, conn, scrapes) })
	d.checkMemory(t, bigSetRSSBound)
	d.checkLogLines(t, bigSetLogs)
}

// listIPSetsHugeMaxMembers: 20 parallel ListIPSets asking for 2^32-1
// members of a 2M-member set get bounded answers (or are told to retry),
// dpd's memory stays bounded, and other Inspect calls and the controller
// stream keep working meanwhile; the pages that follow are the set's
// members in order.
func listIPSetsHugeMaxMembers(t *testing.T, d *daemon, c *liveController, conn *grpc.ClientConn) {
	ic := dpdv1.NewInspectClient(conn)
	rssBefore := d.procStatus(t, "VmRSS")

	type result struct {
		size, members int
		err           error
	}
	results := make([]result, parallelCalls)
	var wg sync.WaitGroup
	for i := range parallelCalls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &dpdv1.ListIPSetsRequest{MaxMembers: math.MaxUint32}
			if i%2 == 0 {
				req.Id = bigSetID
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			resp, err := ic.ListIPSets(ctx, req)
			results[i] = result{size: proto.Size(resp), err: err}
			for _, s := range resp.GetIpSets() {
				results[i].members += len(s.GetMembers())
			}
		}()
	}
	callsDone := make(chan struct{})
	go func() { wg.Wait(); close(callsDone) }()

	// Meanwhile: light Inspect calls answer, the controller stream takes a
	// new endpoint and reports it up, and RSS is sampled.
	c.send(t, wepUpdate("api", "caliapi", 1))
	maxRSS, probes := rssBefore, 0
	tick := time.NewTicker(20 * time.Millisecond) // probe pace, not a wait
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-callsDone:
			running = false
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := ic.GetStatus(ctx, &dpdv1.GetStatusRequest{})
		if err == nil {
			var ep *dpdv1.Endpoint
			ep, err = ic.GetEndpoint(ctx, &dpdv1.GetEndpointRequest{Id: "ns/web"})
			if err == nil && ep.GetStatus() != "up" {
				err = fmt.Errorf("web is %s", ep.GetStatus())
			}
		}
		cancel()
		if err != nil {
			t.Fatalf("light Inspect call during the flood: %v", err)
		}
		probes++
		maxRSS = max(maxRSS, d.procStatus(t, "VmRSS"))
	}
	c.waitUp(t, "api")

	ok, busy := 0, 0
	for i, r := range results {
		switch {
		case r.err == nil:
			ok++
			if r.size > answerBound || r.members > 1000 {
				t.Errorf("call %d: %d bytes, %d members; bound %d bytes, 1000 members", i, r.size, r.members, answerBound)
			}
		case status.Code(r.err) == codes.ResourceExhausted && strings.Contains(r.err.Error(), "retry later"):
			busy++
		default:
			t.Errorf("call %d: %v", i, r.err)
		}
	}
	t.Logf("%d calls: %d answered (largest %d bytes), %d told to retry; %d light calls answered meanwhile; VmRSS %d MiB before, at most %d MiB during (bound +%d MiB)",
		parallelCalls, ok, largest(results, func(r result) int { return r.size }), busy, probes, rssBefore>>20, maxRSS>>20, callsRSSBound>>20)
	if ok == 0 {
		t.Error("no call answered")
	}
	if maxRSS-rssBefore > callsRSSBound {
		t.Errorf("the calls added %d MiB of RSS, bound %d MiB", (maxRSS-rssBefore)>>20, callsRSSBound>>20)
	}

	// Paging: three pages of 1,000 follow on from each other, in order.
	token := ""
	for page := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := ic.ListIPSets(ctx, &dpdv1.ListIPSetsRequest{Id: bigSetID, MaxMembers: math.MaxUint32, PageToken: token})
		cancel()
		must(t, err)
		s := resp.GetIpSets()[0]
		if len(s.GetMembers()) != 1000 || s.GetMemberCount() != bigSetMembers || !s.GetTruncated() || s.GetNextPageToken() == "" {
			t.Fatalf("page %d: %d members of %d, truncated %v, next %q", page, len(s.GetMembers()), s.GetMemberCount(), s.GetTruncated(), s.GetNextPageToken())
		}
		for j, m := range s.GetMembers() {
			if want := bigSetMember(0, page*1000+j); m != want {
				t.Fatalf("page %d member %d: %s, want %s", page, j, m, want)
			}
		}
		token = s.GetNextPageToken()
	}

	d.answers(t)
	checkUp(t, d, "web", "api")
}

func largest[T any](xs []T, f func(T) int) int {
	m := 0
	for _, x := range xs {
		m = max(m, f(x))
	}
	return m
}
