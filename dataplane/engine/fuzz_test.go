package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// fuzzOps turns bytes into a sequence of engine inputs drawn from a small
// universe of names, so references hit, miss, and change often.
type fuzzOps struct {
	data []byte
	pos  int
}

func (f *fuzzOps) next() (byte, bool) {
	if f.pos >= len(f.data) {
		return 0, false
	}
	b := f.data[f.pos]
	f.pos++
	return b, true
}

func (f *fuzzOps) pick(n int) int {
	b, _ := f.next()
	return int(b) % n
}

func (f *fuzzOps) ips(prefix string) []string {
	n := f.pick(4)
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("%s.%d", prefix, f.pick(6)))
	}
	return out
}

func (f *fuzzOps) names(kind string, max int) []string {
	var out []string
	for i, n := 0, f.pick(3); i < n; i++ {
		out = append(out, fmt.Sprintf("%s%d", kind, f.pick(max)))
	}
	return out
}

var fuzzMethods = []string{
	memkernel.MethodConfigure, memkernel.MethodEndApply, memkernel.MethodReplaceIPSet, memkernel.MethodUpdateIPSet,
	memkernel.MethodRemoveIPSet, memkernel.MethodApplyEndpoint, memkernel.MethodRemoveEndpoint,
	memkernel.MethodApplyRoute, memkernel.MethodRemoveRoute, memkernel.MethodApplyService, memkernel.MethodRemoveService,
	memkernel.MethodApplyVTEP, memkernel.MethodRemoveVTEP, memkernel.MethodApplyHostMetadata, memkernel.MethodRemoveHostMetadata,
}

// message builds one message, or returns nil for a non-message action it
// performed itself.
func (f *fuzzOps) message(h *harness, op byte) *felix.ToDataplane {
	switch op % 18 {
	case 0:
		return ipset(fmt.Sprintf("s:%d", f.pick(4)), f.ips("10.0.0")...)
	case 1:
		return ipsetDelta(fmt.Sprintf("s:%d", f.pick(4)), f.ips("10.0.0"), f.ips("10.0.0"))
	case 2:
		return ipsetRemove(fmt.Sprintf("s:%d", f.pick(4)))
	case 3:
		return policy(fmt.Sprintf("p%d", f.pick(4)), allowFrom(f.names("s:", 4)...), denyPort(int32(f.pick(3))))
	case 4:
		return policyRemove(fmt.Sprintf("p%d", f.pick(4)))
	case 5:
		if f.pick(2) == 0 {
			return td(&felix.ActiveProfileRemove{Id: &felix.ProfileID{Name: fmt.Sprintf("prof%d", f.pick(3))}})
		}
		return profile(fmt.Sprintf("prof%d", f.pick(3)), allowFrom(f.names("s:", 4)...))
	case 6:
		wl := fmt.Sprintf("w%d", f.pick(5))
		return wep(wl, fmt.Sprintf("10.65.0.%d", f.pick(5)), f.names("p", 4), f.names("prof", 3)...)
	case 7:
		return wepRemove(fmt.Sprintf("w%d", f.pick(5)))
	case 8:
		dst := fmt.Sprintf("10.65.%d.0/26", f.pick(4))
		if f.pick(2) == 0 {
			return routeRemove(dst)
		}
		return route(dst)
	case 9:
		name := fmt.Sprintf("svc%d", f.pick(3))
		switch f.pick(4) {
		case 0:
			return service("ns", name, fmt.Sprintf("10.96.0.%d", f.pick(9)+1))
		case 1:
			return backends("ns", name, f.ips("10.65.0")...)
		case 2:
			return td(&felix.ServiceRemove{Namespace: "ns", Name: name})
		}
		return td(&felix.ServiceBackendsRemove{Namespace: "ns", Name: name})
	case 10:
		return inSync()
	case 11:
		h.session()
		return nil
	case 12:
		return config("ReportingIntervalSecs", fmt.Sprint(f.pick(3)+1), "InterfacePrefix", "cali")
	case 13:
		h.k.SetLink(fmt.Sprintf("caliw%d", f.pick(5)), model.LinkState(f.pick(3)))
		return nil
	case 14:
		h.k.FailNext(fuzzMethods[f.pick(len(fuzzMethods))], errors.New("injected"))
		return nil
	case 15:
		id := &felix.HostEndpointID{EndpointId: fmt.Sprintf("h%d", f.pick(2))}
		if f.pick(2) == 0 {
			return td(&felix.HostEndpointRemove{Id: id})
		}
		return td(&felix.HostEndpointUpdate{Id: id, Endpoint: &felix.HostEndpoint{Name: fmt.Sprintf("caliw%d", f.pick(5))}})
	case 16:
		// Invalid: a workload endpoint without an interface, or a bad rule.
		if f.pick(2) == 0 {
			m := wep(fmt.Sprintf("w%d", f.pick(5)), "10.65.0.1", nil)
			m.GetWorkloadEndpointUpdate().Endpoint.Name = ""
			return m
		}
		return policy(fmt.Sprintf("p%d", f.pick(4)), &felix.Rule{Action: "maybe"})
	}
	return everyPayloadList[f.pick(len(everyPayloadList))]
}

var everyPayloadList = func() []*felix.ToDataplane {
	var out []*felix.ToDataplane
	for _, m := range everyPayload() {
		out = append(out, m)
	}
	return out
}()

func runFuzzOps(t *testing.T, data []byte) {
	h := newHarness(t)
	h.session()
	f := &fuzzOps{data: data}
	ctx, cancel := context.WithTimeout(h.ctx, waitTimeout)
	defer cancel()
	for {
		op, ok := f.next()
		if !ok {
			break
		}
		msg := f.message(h, op)
		if msg == nil {
			continue
		}
		if err := submitFelix(ctx, h.sess, msg); err != nil {
			t.Fatalf("send: %v (deadlock?)", err)
		}
	}
	h.flush()

	// Converge: no more failures, a final complete snapshot.
	h.k.ClearFailures()
	s := h.session()
	for _, m := range []*felix.ToDataplane{
		ipset("s:0", "10.0.0.1"), policy("p0", allowFrom("s:0")), profile("prof0", allowFrom()),
		wep("w0", "10.65.0.1", []string{"p0"}, "prof0"), wep("w1", "10.65.0.2", nil, "prof0"), inSync(),
	} {
		if err := s.Submit(ctx, tr(t, m)); err != nil {
			t.Fatal(err)
		}
	}
	s.waitFor(t, "DataplaneInSync after convergence", func(m []Status) bool { return count(m, isInSync) == 1 })
	h.flush()
	h.noViolations()
	kernelEps := h.k.Endpoints()
	if len(kernelEps) != 2 {
		t.Fatalf("kernel endpoints after convergence: %v", h.k)
	}
	for _, ep := range kernelEps {
		info, ok := h.e.Endpoint(ep.ID.String())
		if !ok || info.Status == statusError {
			t.Fatalf("kernel endpoint %s: engine has %+v (found %v)", ep.ID, info, ok)
		}
	}
	if sets := h.k.IPSets(); len(sets) != 1 {
		t.Fatalf("kernel sets after convergence: %v", sets)
	}
	if n := len(h.k.VTEPs()) + len(h.k.Routes()) + len(h.k.Services()); n != 0 {
		t.Fatalf("%d VTEPs/routes/services left after a snapshot without any", n)
	}
	testutil.WaitFor(t, waitTimeout, "nothing dirty", func() bool { return h.e.Status().Dirty == 0 })
}

func FuzzEngineMessages(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 1, 2, 3, 6, 0, 0, 10, 7, 1})
	f.Add([]byte{6, 2, 1, 1, 0, 3, 0, 1, 10, 14, 5, 3, 1, 0, 4, 0, 2, 1, 11, 6, 2, 10})
	f.Add([]byte{14, 5, 6, 1, 0, 0, 0, 10, 13, 1, 1, 8, 1, 9, 0, 1, 16, 0, 16, 1, 2, 17, 3, 11, 10})
	f.Add([]byte{12, 0, 15, 1, 1, 15, 0, 0, 10, 2, 0, 11, 0, 1, 1, 1, 10, 14, 6, 7, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 512 {
			data = data[:512]
		}
		runFuzzOps(t, data)
	})
}

// TestFuzzCorpusLong runs a few long pseudo-random sequences on every test
// run, beyond the seed corpus.
func TestFuzzCorpusLong(t *testing.T) {
	for seed := 1; seed <= 4; seed++ {
		data := make([]byte, 400)
		x := uint32(seed * 2654435761)
		for i := range data {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			data[i] = byte(x)
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runFuzzOps(t, data) })
	}
}
