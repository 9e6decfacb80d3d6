package linux

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

func hasOp(ops []string, prefix string) bool {
	return slices.ContainsFunc(ops, func(o string) bool { return strings.HasPrefix(o, prefix) })
}

// Applying a host endpoint attaches the host programs, installs both
// policies and marks the interface READY|HOST, touching no route or
// neighbour; re-applying writes nothing; a policy change is one jump
// write; removal unpolices first, then detaches.
func TestHostEndpointApplyRemove(t *testing.T) {
	f := newFakeKernel(t)
	idx := f.addLink("eth0")
	k := f.hostKernel()
	ep := f.hostEndpoint("h1", "eth0", "deny-all", "allow-all")
	if err := k.ApplyHostEndpoint(ep); err != nil {
		t.Fatal(err)
	}
	ops := f.take()
	want := []string{"AttachHost eth0", "InstallPolicy slot=0 dir=1 ingress:deny-all", "InstallPolicy slot=0 dir=0 egress:allow-all", "SetIfState eth0 slot=0 flags=0x5"}
	for _, w := range want {
		if !hasOp(ops, w) {
			t.Fatalf("ops %q lack %q", ops, w)
		}
	}
	if hasOp(ops, "ConfigureEndpoint") || hasOp(ops, "ConfigureNewEndpoint") {
		t.Fatalf("host endpoint configured routes: %q", ops)
	}
	if e := f.ifstate[idx]; e.Flags != abi.IfHost|abi.IfReady {
		t.Fatalf("ifstate %+v", e)
	}
	if err := k.ApplyHostEndpoint(ep); err != nil {
		t.Fatal(err)
	}
	if ops := f.take(); len(ops) != 0 {
		t.Fatalf("unchanged re-apply wrote %q", ops)
	}
	ep2 := f.hostEndpoint("h1", "eth0", "allow-ssh", "allow-all")
	if err := k.ApplyHostEndpoint(ep2); err != nil {
		t.Fatal(err)
	}
	if n := f.count("InstallPolicy"); n != 1 || f.count("SetIfState") != 0 || f.count("AttachHost") != 0 {
		t.Fatalf("policy change wrote %q", f.take())
	}
	f.take()
	if err := k.RemoveHostEndpoint(ep2); err != nil {
		t.Fatal(err)
	}
	ops = f.take()
	if len(ops) < 2 || ops[0] != "DeleteIfState eth0" || ops[1] != "Detach eth0" {
		t.Fatalf("remove wrote %q, want the ifstate entry deleted, then the detach", ops)
	}
	if hasOp(ops, "UnconfigureEndpoint") {
		t.Fatalf("remove touched routes: %q", ops)
	}
	if _, ok := f.ifstate[idx]; ok || f.attached[idx] != "" {
		t.Fatal("eth0 still policed after removal")
	}
}

// A failed attach leaves the interface unpoliced (no ifstate entry), never
// closed, and the next apply succeeds.
func TestHostEndpointAttachFailureStaysOpen(t *testing.T) {
	f := newFakeKernel(t)
	idx := f.addLink("eth0")
	k := f.hostKernel()
	f.fail["AttachHost"] = errors.New("boom")
	ep := f.hostEndpoint("h1", "eth0", "deny-all", "deny-all")
	if err := k.ApplyHostEndpoint(ep); err == nil {
		t.Fatal("apply succeeded with a failing attach")
	}
	if _, ok := f.ifstate[idx]; ok {
		t.Fatal("a failed apply wrote the ifstate entry")
	}
	delete(f.fail, "AttachHost")
	if err := k.ApplyHostEndpoint(ep); err != nil {
		t.Fatal(err)
	}
	if f.ifstate[idx].Flags != abi.IfHost|abi.IfReady {
		t.Fatal("not policed after the retry")
	}
	if err := k.ApplyHostEndpoint(f.hostEndpoint("h1", "eth9", "deny-all", "deny-all")); err == nil {
		t.Fatal("apply to a missing interface succeeded")
	}
}

// A restart adopts host interfaces as they are: the first apply that
// binds them again writes nothing, and garbage collection detaches the
// host programs of one no host endpoint binds any more, without touching
// its routes.
func TestHostEndpointRestartAdoption(t *testing.T) {
	f := newFakeKernel(t)
	eth0, eth1 := f.addLink("eth0"), f.addLink("eth1")
	k := f.hostKernel()
	ep0 := f.hostEndpoint("h0", "eth0", "deny-all", "allow-all")
	ep1 := f.hostEndpoint("h1", "eth1", "deny-all", "allow-all")
	if err := k.ApplyHostEndpoint(ep0); err != nil {
		t.Fatal(err)
	}
	if err := k.ApplyHostEndpoint(ep1); err != nil {
		t.Fatal(err)
	}
	f.take()

	k2 := f.hostKernel() // restart: the pinned state is adopted
	if ops := f.take(); len(ops) != 0 {
		t.Fatalf("start wrote %q", ops)
	}
	if err := k2.ApplyHostEndpoint(ep0); err != nil {
		t.Fatal(err)
	}
	if ops := f.take(); len(ops) != 0 {
		t.Fatalf("the first apply of an unchanged host endpoint wrote %q", ops)
	}
	if err := k2.EndApply(); err != nil { // ends the restart: garbage collection
		t.Fatal(err)
	}
	ops := f.take()
	if !hasOp(ops, "Detach eth1") || hasOp(ops, "Detach eth0") || hasOp(ops, "Unconfigure") {
		t.Fatalf("collection wrote %q, want eth1 detached and nothing else unrouted", ops)
	}
	if f.ifstate[eth0].Flags != abi.IfHost|abi.IfReady {
		t.Fatal("eth0 lost its policy")
	}
	if _, ok := f.ifstate[eth1]; ok {
		t.Fatal("eth1 still policed")
	}
}

// Felix's failsafe format: "proto:net:port", "proto:port" or "port"
// (TCP), IPv6 nets in brackets; an entry without a net is either family.
func TestParseFailsafes(t *testing.T) {
	fs, err := ParseFailsafes("tcp:22, udp:10.0.0.0/8:53,tcp:[fd00::/8]:22,tcp:192.168.1.1:6443, 8443,udp:[fd00::1]:53", true)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fs {
		if !f.Inbound {
			t.Errorf("%+v not inbound", f)
		}
		got = append(got, fmt.Sprintf("%d:%s:%d", f.Proto, f.Net, f.Port))
	}
	want := []string{"6:0.0.0.0/0:22", "6:::/0:22", "17:10.0.0.0/8:53", "6:fd00::/8:22", "6:192.168.1.1/32:6443",
		"6:0.0.0.0/0:8443", "6:::/0:8443", "17:fd00::1/128:53"}
	if !slices.Equal(got, want) {
		t.Fatalf("parsed %q, want %q", got, want)
	}
	if fs, err := ParseFailsafes("none", false); err != nil || fs != nil {
		t.Fatalf("none: %v %v", fs, err)
	}
	fs, err = ParseFailsafes("sctp:9999,tcp:22", false)
	if enforced, sctp := enforcedFailsafes(fs); err != nil || len(fs) != 4 || sctp != 2 || len(enforced) != 2 || enforced[0].Proto != 6 {
		t.Fatalf("sctp: %+v %v, enforced %+v", fs, err, enforced)
	}
	for _, bad := range []string{"icmp:22", "tcp", "tcp:70000", "tcp:10.0.0.0/33:22", "tcp:[fd00::/8:22",
		"tcp:[zz::]:22", "tcp:[::ffff:10.0.0.0/104]:22", "tcp:1.2.3.4:[fd00::]:22", "a:b:c:d"} {
		if _, err := ParseFailsafes(bad, true); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	all, err := failsafesFromConfig(nil)
	if err != nil || len(all) != 36 {
		t.Fatalf("defaults: %d %v", len(all), err)
	}
}

// Forward policy goes into a second slot that the ifstate entry names in
// its upper flag bits; a restart adopts it; dropping it rewrites the
// entry before the slot is cleared and freed.
func TestHostEndpointForwardSlot(t *testing.T) {
	f := newFakeKernel(t)
	idx := f.addLink("eth0")
	k := f.hostKernel()
	ep := f.hostEndpoint("h1", "eth0", "deny-all", "deny-all")
	ep.Forward = &model.HostStage{Ingress: f.policy("fwd-in"), HasIngress: true}
	if err := k.ApplyHostEndpoint(ep); err != nil {
		t.Fatal(err)
	}
	ops := f.take()
	if !hasOp(ops, "InstallPolicy slot=1 dir=1 ingress:fwd-in") || hasOp(ops, "InstallPolicy slot=1 dir=0") {
		t.Fatalf("ops %q: want the forward ingress policy alone in slot 1", ops)
	}
	if got, want := f.ifstate[idx].Flags, uint32(abi.IfHost|abi.IfReady|2<<abi.IfFwdShift); got != want {
		t.Fatalf("ifstate flags %#x, want %#x", got, want)
	}
	k2 := f.hostKernel() // restart
	if err := k2.ApplyHostEndpoint(ep); err != nil {
		t.Fatal(err)
	}
	if ops := f.take(); len(ops) != 0 {
		t.Fatalf("adopted forward policy rewritten: %q", ops)
	}
	noFwd := f.hostEndpoint("h1", "eth0", "deny-all", "deny-all")
	if err := k2.ApplyHostEndpoint(noFwd); err != nil {
		t.Fatal(err)
	}
	ops = f.take()
	i := slices.IndexFunc(ops, func(o string) bool { return strings.HasPrefix(o, "SetIfState eth0 slot=0 flags=0x5") })
	j := slices.IndexFunc(ops, func(o string) bool { return strings.HasPrefix(o, "ClearPolicy slot=1 dir=0") })
	if i < 0 || j < 0 || j < i {
		t.Fatalf("ops %q: want the ifstate entry rewritten, then the forward slot cleared", ops)
	}
	if k2.eps.slots.inUse(1) {
		t.Fatal("forward slot still allocated")
	}
}

func TestToHostAction(t *testing.T) {
	for v, want := range map[string]uint32{"": abi.ToHostDrop, "Drop": abi.ToHostDrop, "RETURN": abi.ToHostReturn, "accept": abi.ToHostAccept} {
		if got, err := toHostAction(map[string]string{ConfigEndpointToHost: v}); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", v, got, err, want)
		}
	}
	if _, err := toHostAction(map[string]string{ConfigEndpointToHost: "Allow"}); err == nil {
		t.Error("Allow accepted")
	}
}

// Untracked and pre-DNAT policies get a slot each, named in
// dpd_hep_stages before anything can reach them; a restart adopts them;
// removing the host endpoint clears the entry first and frees every slot.
func TestHostEndpointStageSlots(t *testing.T) {
	f := newFakeKernel(t)
	idx := f.addLink("eth0")
	k := f.hostKernel()
	ep := f.hostEndpoint("h1", "eth0", "deny-all", "deny-all")
	ep.Untracked = &model.HostStage{Ingress: f.policy("raw-in"), Egress: f.policy("raw-out"), HasIngress: true, HasEgress: true}
	ep.PreDNAT = &model.HostStage{Ingress: f.policy("pre-in"), HasIngress: true}
	if err := k.ApplyHostEndpoint(ep); err != nil {
		t.Fatal(err)
	}
	ops := f.take()
	for _, w := range []string{"InstallPolicy slot=1 dir=1 ingress:raw-in", "InstallPolicy slot=1 dir=0 egress:raw-out",
		"InstallPolicy slot=2 dir=1 ingress:pre-in", "SetHepStages eth0 untracked=2 prednat=3"} {
		if !hasOp(ops, w) {
			t.Fatalf("ops %q lack %q", ops, w)
		}
	}
	if f.hepStages[idx] != (tcbpf.HepStages{Untracked: 2, PreDNAT: 3}) {
		t.Fatalf("stages %+v", f.hepStages[idx])
	}
	k2 := f.hostKernel()
	if err := k2.ApplyHostEndpoint(ep); err != nil {
		t.Fatal(err)
	}
	if ops := f.take(); len(ops) != 0 {
		t.Fatalf("adopted stages rewritten: %q", ops)
	}
	if err := k2.RemoveHostEndpoint(ep); err != nil {
		t.Fatal(err)
	}
	ops = f.take()
	i := slices.Index(ops, "SetHepStages eth0 untracked=0 prednat=0")
	j := slices.IndexFunc(ops, func(o string) bool { return strings.HasPrefix(o, "ClearPolicy slot=1") })
	if i < 0 || j < 0 || j < i {
		t.Fatalf("remove wrote %q: want the stages entry cleared before the slots", ops)
	}
	for s := uint32(0); s < 3; s++ {
		if k2.eps.slots.inUse(s) {
			t.Errorf("slot %d still allocated", s)
		}
	}
	if len(f.hepStages) != 0 {
		t.Errorf("stages left: %v", f.hepStages)
	}
}

// Return's to-host policy: installed in a slot of its own before
// dpd_hep_cfg names it; withdrawn, the entry lets go before the slot is
// cleared; Configure's action keeps the slot named.
func TestToHostPolicySlot(t *testing.T) {
	f := newFakeKernel(t)
	k := f.hostKernel()
	pol := f.policy("to-host")
	if err := k.ApplyToHostPolicy(&pol); err != nil {
		t.Fatal(err)
	}
	ops := f.take()
	i := slices.IndexFunc(ops, func(o string) bool { return strings.HasPrefix(o, "InstallPolicy slot=0 dir=1 ingress:to-host") })
	j := slices.Index(ops, "SetToHostAction 0 slot=1")
	if i < 0 || j < i {
		t.Fatalf("ops %q", ops)
	}
	k.mu.Lock()
	k.configureToHostLocked(map[string]string{ConfigEndpointToHost: "Return"})
	k.mu.Unlock()
	if f.toHost != [2]uint32{abi.ToHostReturn, 1} {
		t.Fatalf("dpd_hep_cfg %v", f.toHost)
	}
	f.take()
	if err := k.ApplyToHostPolicy(nil); err != nil {
		t.Fatal(err)
	}
	ops = f.take()
	i = slices.Index(ops, "SetToHostAction 2 slot=0")
	j = slices.IndexFunc(ops, func(o string) bool { return strings.HasPrefix(o, "ClearPolicy slot=0") })
	if i < 0 || j < i || k.eps.slots.inUse(0) {
		t.Fatalf("ops %q", ops)
	}
}
