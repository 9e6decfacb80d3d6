package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

func TestCallLimiter(t *testing.T) {
	l := newCallLimiter(2, time.Millisecond)
	ctx := context.Background()
	r1, err := l.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.acquire(ctx); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call = %v, want ResourceExhausted", err)
	}
	r1()
	r3, err := l.acquire(ctx)
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	r2()
	r3()
	if len(l.slots) != 0 {
		t.Fatalf("%d slots still taken", len(l.slots))
	}
}

// A waiting call gets the slot a finishing call gives back, or gives up
// when its context ends.
func TestCallLimiterWaits(t *testing.T) {
	l := newCallLimiter(1, time.Hour)
	release, err := l.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.acquire(canceled); status.Code(err) != codes.Canceled {
		t.Fatalf("canceled call = %v, want Canceled", err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := l.acquire(context.Background())
		if err == nil {
			r()
		}
		got <- err
	}()
	testutil.WaitFor(t, 10*time.Second, "a call waiting for the slot", func() bool { return l.waiting.Load() == 1 })
	release()
	if err := <-got; err != nil {
		t.Fatalf("waiting call: %v", err)
	}
}

// The heavy Inspect calls share the limiter: with every slot taken they
// answer ResourceExhausted; GetStatus is never held back.
func TestInspectCallsBounded(t *testing.T) {
	s := newInspectService(fakeEngine{}, nil, "test", "fake")
	s.heavy = newCallLimiter(1, time.Millisecond)
	release, err := s.heavy.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ctx := context.Background()
	calls := map[string]func() error{
		"ListEndpoints": func() error { _, err := s.ListEndpoints(ctx, &dpdv1.ListEndpointsRequest{}); return err },
		"ListPolicies":  func() error { _, err := s.ListPolicies(ctx, &dpdv1.ListPoliciesRequest{}); return err },
		"ListIPSets":    func() error { _, err := s.ListIPSets(ctx, &dpdv1.ListIPSetsRequest{}); return err },
		"ListServices":  func() error { _, err := s.ListServices(ctx, &dpdv1.ListServicesRequest{}); return err },
		"ListRoutes":    func() error { _, err := s.ListRoutes(ctx, &dpdv1.ListRoutesRequest{}); return err },
	}
	for name, call := range calls {
		if err := call(); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%s with no free slot = %v, want ResourceExhausted", name, err)
		}
	}
}
