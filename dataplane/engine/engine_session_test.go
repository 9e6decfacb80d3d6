package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

func TestBackpressure(t *testing.T) {
	k := memkernel.New()
	opts := fastOptions(k)
	opts.InboxSize = 2
	e := New(opts) // not running yet: nothing drains the inbox
	s := e.NewSession("test")
	defer s.Close()
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if err := s.Submit(ctx, tr(t, inSync())); err != nil {
			t.Fatal(err)
		}
	}

	// A full inbox blocks the sender until its context ends.
	cctx, cancel := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() { cancelled <- s.Submit(cctx, &model.InSync{}) }()
	testutil.WaitFor(t, waitTimeout, "sender blocked", func() bool { return e.BlockedSenders() == 1 })
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Submit = %v, want context.Canceled", err)
	}

	// ... or until the engine drains it. Nothing is dropped.
	done := make(chan error, 1)
	a := tr(t, wep("a", "10.65.0.1", nil))
	go func() { done <- s.Submit(ctx, a) }()
	testutil.WaitFor(t, waitTimeout, "sender blocked", func() bool { return e.BlockedSenders() == 1 })
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { _ = e.Run(rctx); close(ran) }()
	defer func() { stop(); <-ran }()
	if err := <-done; err != nil {
		t.Fatalf("blocked Submit = %v after drain", err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := e.Status(); st.MessagesReceived != 3 || st.Up != 1 {
		t.Fatalf("status %+v", st)
	}
}

func TestSessionLifecycle(t *testing.T) {
	h := newHarness(t)
	first := h.session()
	h.send(wep("a", "10.65.0.1", nil), inSync())
	second := h.session()
	testutil.WaitFor(t, waitTimeout, "first Out closed", first.isClosed)
	if err := first.Submit(h.ctx, tr(t, wepRemove("a"))); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("Submit on a replaced session = %v", err)
	}
	if second.ID() <= first.ID() {
		t.Fatalf("session ids %d then %d", first.ID(), second.ID())
	}
	second.Close()
	second.Close() // idempotent
	testutil.WaitFor(t, waitTimeout, "second Out closed", second.isClosed)
	h.flush()
	// Closed sessions leave the dataplane enforcing the last state.
	if len(h.k.Endpoints()) != 1 || h.e.Status().Connected {
		t.Fatalf("after close: endpoints %d, status %+v", len(h.k.Endpoints()), h.e.Status())
	}
	// Link changes are still handled with no controller connected.
	h.k.SetLink("calia", model.LinkDown)
	testutil.WaitFor(t, waitTimeout, "down without a session", func() bool {
		st, _ := h.endpointStatus("a")
		return st == statusDown
	})
}

func TestRunStopClosesSession(t *testing.T) {
	k := memkernel.New()
	e := New(fastOptions(k))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- e.Run(ctx) }()
	s := e.NewSession("x")
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	for range s.Out() {
	}
	if err := s.Submit(context.Background(), &model.InSync{}); err == nil {
		t.Fatal("Submit after stop succeeded")
	}
	if err := e.Flush(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Flush after stop = %v", err)
	}
}

// everyPayload has one valid message per ToDataplane payload case.
func everyPayload() map[string]*felix.ToDataplane {
	msgs := map[string]*felix.ToDataplane{}
	add := func(m *felix.ToDataplane) { msgs[felixconv.PayloadKind(m)] = m }
	for _, m := range snapshot() {
		add(m)
	}
	add(inSync())
	add(ipsetDelta("s:web", []string{"10.0.0.3"}, nil))
	add(ipsetRemove("s:gone"))
	add(policyRemove("gone"))
	add(td(&felix.ActiveProfileRemove{Id: &felix.ProfileID{Name: "gone"}}))
	add(wepRemove("gone"))
	add(td(&felix.HostEndpointUpdate{Id: &felix.HostEndpointID{EndpointId: "eth0"}, Endpoint: &felix.HostEndpoint{Name: "eth0"}}))
	add(td(&felix.HostEndpointRemove{Id: &felix.HostEndpointID{EndpointId: "gone"}}))
	add(routeRemove("10.99.0.0/24"))
	add(td(&felix.ServiceRemove{Namespace: "ns", Name: "gone"}))
	add(td(&felix.ServiceBackendsRemove{Namespace: "ns", Name: "gone"}))
	p := func(m *felix.ToDataplane) { add(m) }
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_HostMetadataUpdate{HostMetadataUpdate: &felix.HostMetadataUpdate{Hostname: "n1", Ipv4Addr: "192.168.0.1"}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_HostMetadataRemove{HostMetadataRemove: &felix.HostMetadataRemove{Hostname: "n9"}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_IpamPoolUpdate{IpamPoolUpdate: &felix.IPAMPoolUpdate{Id: "pool", Pool: &felix.IPAMPool{Cidr: "10.65.0.0/16"}}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_IpamPoolRemove{IpamPoolRemove: &felix.IPAMPoolRemove{Id: "old"}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_ServiceAccountUpdate{ServiceAccountUpdate: &felix.ServiceAccountUpdate{Id: &felix.ServiceAccountID{Namespace: "ns", Name: "sa"}}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_ServiceAccountRemove{ServiceAccountRemove: &felix.ServiceAccountRemove{Id: &felix.ServiceAccountID{Namespace: "ns", Name: "old"}}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_NamespaceUpdate{NamespaceUpdate: &felix.NamespaceUpdate{Id: &felix.NamespaceID{Name: "ns"}}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_NamespaceRemove{NamespaceRemove: &felix.NamespaceRemove{Id: &felix.NamespaceID{Name: "old"}}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_VtepUpdate{VtepUpdate: &felix.VXLANTunnelEndpointUpdate{Node: "n2", Mac: "66:00:00:00:00:02", Ipv4Addr: "10.65.1.0", ParentDeviceIp: "192.168.0.2"}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_VtepRemove{VtepRemove: &felix.VXLANTunnelEndpointRemove{Node: "n3"}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_WireguardEndpointUpdate{WireguardEndpointUpdate: &felix.WireguardEndpointUpdate{Hostname: "n2", PublicKey: "k", InterfaceIpv4Addr: "10.65.1.1"}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_WireguardEndpointRemove{WireguardEndpointRemove: &felix.WireguardEndpointRemove{Hostname: "n3"}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_WireguardEndpointV6Update{WireguardEndpointV6Update: &felix.WireguardEndpointV6Update{Hostname: "n2", PublicKeyV6: "k", InterfaceIpv6Addr: "fd00::1"}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_WireguardEndpointV6Remove{WireguardEndpointV6Remove: &felix.WireguardEndpointV6Remove{Hostname: "n3"}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_GlobalBgpConfigUpdate{GlobalBgpConfigUpdate: &felix.GlobalBGPConfigUpdate{ServiceClusterCidrs: []string{"10.96.0.0/12"}}}})
	p(&felix.ToDataplane{Payload: &felix.ToDataplane_Encapsulation{Encapsulation: &felix.Encapsulation{VxlanEnabled: true}}})
	return msgs
}

func TestEveryPayloadIsHandled(t *testing.T) {
	msgs := everyPayload()
	oneof := (&felix.ToDataplane{}).ProtoReflect().Descriptor().Oneofs().ByName("payload")
	fields := oneof.Fields()
	if fields.Len() != 35 {
		t.Fatalf("ToDataplane has %d payload cases; update this test", fields.Len())
	}
	for i := 0; i < fields.Len(); i++ {
		name := string(fields.Get(i).Name())
		m, ok := msgs[name]
		if !ok {
			t.Errorf("no test message for payload %s", name)
			continue
		}
		if k := tr(t, m).Kind(); k != name {
			t.Errorf("payload %s translates to an update of kind %q", name, k)
		}
	}
	h := newHarness(t)
	h.session()
	var order []*felix.ToDataplane
	for i := 0; i < fields.Len(); i++ {
		name := string(fields.Get(i).Name())
		if name != "in_sync" {
			order = append(order, msgs[name])
		}
	}
	h.send(append(order, inSync())...)
	st := h.e.Status()
	if st.InvalidMessages != 0 || st.MessagesReceived != uint64(fields.Len()) {
		t.Fatalf("received %d invalid %d, want %d and 0", st.MessagesReceived, st.InvalidMessages, fields.Len())
	}
	if st.HostEndpoints != 1 || h.e.acks.count(model.StoredEncapsulation) != 1 || h.e.acks.count(model.StoredIPAMPool) != 1 {
		t.Fatalf("stored: %+v", st)
	}
	h.noViolations()
}

// lossyWatch is a memkernel whose first WatchLinks ends with an error when
// told to, after a link change nobody saw.
type lossyWatch struct {
	*memkernel.Kernel
	drop  chan struct{}
	calls atomic.Int32
}

func (k *lossyWatch) WatchLinks(ctx context.Context, report func(model.LinkUpdate)) error {
	if k.calls.Add(1) > 1 {
		return k.Kernel.WatchLinks(ctx, report)
	}
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-k.drop:
		case <-ctx.Done():
		}
		cancel()
	}()
	_ = k.Kernel.WatchLinks(wctx, report)
	k.SetLink("calia", model.LinkDown) // missed: no watcher now
	return errors.New("netlink subscription lost")
}

func TestWatchLinksRestartRechecksLinks(t *testing.T) {
	k := &lossyWatch{Kernel: memkernel.New(), drop: make(chan struct{})}
	opts := fastOptions(k.Kernel)
	opts.Kernel = k
	e := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { _ = e.Run(ctx); close(ran) }()
	defer func() { cancel(); <-ran }()
	h := &harness{t: t, k: k.Kernel, e: e, ctx: ctx}
	h.session()
	h.send(wep("a", "10.65.0.1", nil), inSync())
	if st, _ := h.endpointStatus("a"); st != statusUp {
		t.Fatalf("status %q", st)
	}
	close(k.drop)
	testutil.WaitFor(t, waitTimeout, "endpoint re-checked after the watch restarted", func() bool {
		st, _ := h.endpointStatus("a")
		return st == statusDown
	})
	if k.calls.Load() < 2 {
		t.Fatal("WatchLinks not restarted")
	}
}
