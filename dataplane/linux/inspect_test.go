package linux

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestTraceResult reads every outcome the programs report in dpd_state.
func TestTraceResult(t *testing.T) {
	reached := func(flags, verdict uint32, rule uint64) tcbpf.TraceResult {
		return tcbpf.TraceResult{Reached: true, State: tcbpf.State{Ifindex: 5, Flags: flags, Verdict: verdict, RuleId: rule}}
	}
	for _, tt := range []struct {
		name string
		in   tcbpf.TraceResult
		want model.TraceResult
	}{
		{"not ready", tcbpf.TraceResult{Ret: abi.TCActShot}, model.TraceResult{Return: abi.TCActShot, Stage: model.TraceNotReady}},
		{"no backend", tcbpf.TraceResult{State: tcbpf.State{Flags: abi.StNoBackend}}, model.TraceResult{Stage: model.TraceNoBackend}},
		{"no policy", reached(abi.StNoPolicy, 0, 0), model.TraceResult{Stage: model.TraceNoPolicy}},
		{"incomplete", reached(0, 0, 0), model.TraceResult{Stage: model.TraceIncomplete}},
		{"allowed", reached(abi.StEpilogue, abi.VerdictAllow, 11), model.TraceResult{Stage: model.TraceDecided, Allowed: true, RuleID: 11}},
		{"denied", reached(abi.StEpilogue, abi.VerdictDeny, 12), model.TraceResult{Stage: model.TraceDecided, RuleID: 12}},
		{"established", reached(abi.StEpilogue|abi.StCTFwd, abi.VerdictDeny, 12),
			model.TraceResult{Stage: model.TraceDecided, RuleID: 12, Conntrack: "established"}},
		{"reply", reached(abi.StEpilogue|abi.StCTRev, abi.VerdictDeny, 14),
			model.TraceResult{Stage: model.TraceDecided, RuleID: 14, Conntrack: "reply"}},
		{"related", reached(abi.StNoPolicy|abi.StCTRelated, 0, 0), model.TraceResult{Stage: model.TraceNoPolicy, Conntrack: "related"}},
		{"failsafe", reached(abi.StEpilogue|abi.StFailsafe, abi.VerdictDeny, 14),
			model.TraceResult{Stage: model.TraceDecided, RuleID: 14, Exempt: "failsafe port"}},
		{"neighbour discovery", reached(abi.StEpilogue|abi.StICMP6ND, abi.VerdictDeny, 14),
			model.TraceResult{Stage: model.TraceDecided, RuleID: 14, Exempt: "neighbour discovery"}},
	} {
		if got := traceResult(tt.in); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// TestInspectKernel asks the kernel Inspect's questions through the
// engine's interface: details, rule tables, a trace through the real
// programs naming the deciding rule, counters and map usage.
func TestInspectKernel(t *testing.T) {
	k := openKernel(t, newPinDir(t))
	watch(t, k)
	a, b := newWorkload(t, "10.77.8.1"), newWorkload(t, "10.77.8.2")
	testutil.WaitFor(t, 5*time.Second, "both interfaces seen", func() bool {
		_, okA := k.mon.Ifindex(a.HostIface)
		_, okB := k.mon.Ifindex(b.HostIface)
		return okA && okB
	})
	for _, ep := range []*model.Endpoint{endpointFor(a, 1, allowAll(), allowAll()), endpointFor(b, 2, denyAll(), allowAll())} {
		if err := applyKnown(t, k, ep); err != nil {
			t.Fatalf("apply %s: %v", ep.Iface, err)
		}
	}
	var ki engine.KernelInspector = k

	det, ok := ki.EndpointDetails(b.HostIface)
	if !ok || det.Ifindex != ifindexOf(t, b.HostIface) || !det.Ready || det.AttachMode == "" || det.IngressProgram == "" {
		t.Fatalf("EndpointDetails(%s) = %+v, %v", b.HostIface, det, ok)
	}
	rules, ok := ki.Rules(b.HostIface, model.Ingress)
	if !ok || len(rules) != 2 || rules[0].Policy != "deny" || rules[0].Kind != "profile" || rules[1].Synthetic != model.SyntheticNoMatch {
		t.Fatalf("Rules(%s, ingress) = %+v, %v", b.HostIface, rules, ok)
	}

	res, err := ki.Trace(b.HostIface, model.Ingress, icmpFrame(a.IP, b.IP))
	if err != nil {
		t.Fatal(err)
	}
	if res.Stage != model.TraceDecided || res.Allowed || !res.RuleFound || res.Rule != rules[0] || res.Ifindex != det.Ifindex {
		t.Fatalf("trace a -> b into b = %+v, want denied by %+v", res, rules[0])
	}
	res, err = ki.Trace(a.HostIface, model.Egress, icmpFrame(a.IP, b.IP))
	if err != nil || res.Stage != model.TraceDecided || !res.Allowed || res.Rule.Policy != "allow" {
		t.Fatalf("trace a -> b out of a = %+v, %v, want allowed by the allow profile", res, err)
	}
	if _, err := ki.Trace("nosuch0", model.Ingress, icmpFrame(a.IP, b.IP)); !errors.Is(err, engine.ErrNotProgrammed) {
		t.Errorf("trace of an unknown interface: %v, want ErrNotProgrammed", err)
	}
	// A trace writes no counters.
	if c, err := ki.ReadCounter(rules[0].CounterID); err != nil || c.Packets != 0 {
		t.Errorf("counter of the deny rule after a trace = %+v, %v", c, err)
	}

	usage, err := ki.MapUsage()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]model.MapUsage{}
	for _, u := range usage {
		got[u.Name] = u
	}
	// Two interfaces, each with a policy per direction, after the epilogue
	// and the host entry programs' two continuations.
	if got["dpd_ifstate"].Entries != 2 || got["dpd_jump"].Entries != 7 || got["dpd_conntrack"].Capacity == 0 || !got["dpd_conntrack"].Conntrack {
		t.Errorf("map usage: %+v", usage)
	}

	_ = k.Close()
	if _, err := ki.Trace(b.HostIface, model.Ingress, icmpFrame(a.IP, b.IP)); err == nil {
		t.Error("trace after Close succeeded")
	}
	if _, err := ki.MapUsage(); err == nil {
		t.Error("map usage after Close succeeded")
	}
}

// icmpFrame is an Ethernet frame with an ICMP echo request from src to dst.
func icmpFrame(src, dst string) []byte {
	f := make([]byte, 14+20+8)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, 1
	binary.BigEndian.PutUint16(ip[2:], 28)
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[10:], ^sum16(ip))
	icmp := f[34:]
	icmp[0] = 8
	binary.BigEndian.PutUint16(icmp[2:], ^sum16(icmp))
	return f
}

func sum16(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}
