package linux

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

var (
	vtepLocal   = &model.VTEP{Node: "node1", MAC: net.HardwareAddr{0x66, 0, 0, 0, 0, 1}, IPv4Addr: netip.MustParseAddr("10.65.0.1"), ParentDeviceIP: netip.MustParseAddr("192.168.0.1")}
	vtepRemote  = &model.VTEP{Node: "node2", MAC: net.HardwareAddr{0x66, 0, 0, 0, 0, 2}, IPv4Addr: netip.MustParseAddr("10.65.1.1"), ParentDeviceIP: netip.MustParseAddr("192.168.0.2")}
	poolVX      = &model.Route{Dst: netip.MustParsePrefix("10.65.0.0/16"), PoolType: poolVXLAN, NATOutgoing: true}
	blockNode2  = &model.Route{Dst: netip.MustParsePrefix("10.65.1.0/26"), PoolType: poolVXLAN, Types: abi.RTRemoteWorkload, DstNodeName: "node2", DstNodeIP: netip.MustParseAddr("192.168.0.2")}
	tunnelNode2 = &model.Route{Dst: netip.MustParsePrefix("10.65.1.1/32"), PoolType: poolVXLAN, Types: abi.RTRemoteTunnel, DstNodeName: "node2", TunnelVXLAN: true}
)

// Routes, tunnels and masquerading, step by step through the engine's
// calls: a remote block's kernel route waits for the VTEPs it goes
// through, the nat_outgoing table is written once per change of pools,
// and removing a VTEP takes away exactly the routes through it.
func TestRoutesAndTunnelsGolden(t *testing.T) {
	f := newFakeKernel(t)
	k := f.kernel()
	tr := &transcript{f: f}
	tr.step(t, "pool and a remote block before any VTEP: BPF routes only", func() error {
		return errorsJoin(k.ApplyRoute(poolVX), k.ApplyRoute(blockNode2), k.ApplyRoute(tunnelNode2))
	})
	tr.step(t, "local VTEP: the device, then the device route to node2's VTEP", func() error { return k.ApplyVTEP(vtepLocal) })
	tr.step(t, "node2's VTEP: its peer, then the block's route through it", func() error { return k.ApplyVTEP(vtepRemote) })
	tr.step(t, "end of the pass: the nat_outgoing table, collection", k.EndApply)
	tr.step(t, "an unchanged pass: nothing", k.EndApply)
	tr.step(t, "node2's VTEP goes: its peer and the block's route", func() error { return k.RemoveVTEP("node2") })
	tr.step(t, "local VTEP goes: the device, and the routes through it with it", func() error { return k.RemoveVTEP("node1") })
	tr.step(t, "routes go; the next pass empties the table", func() error {
		return errorsJoin(k.RemoveRoute(tunnelNode2), k.RemoveRoute(blockNode2), k.RemoveRoute(poolVX), k.EndApply())
	})
	tr.check(t, goldenRoutesAndTunnels)
}

const goldenRoutesAndTunnels = `== pool and a remote block before any VTEP: BPF routes only
  SetRoute 10.65.0.0/16
  SetRoute 10.65.1.0/26
  SetRoute 10.65.1.1/32
  | bpfroute 10.65.0.0/16 flags=0x300 pool=2
  | bpfroute 10.65.1.0/26 flags=0x901 pool=2
  | bpfroute 10.65.1.1/32 flags=0x910 pool=2
== local VTEP: the device, then the device route to node2's VTEP
  EnsureVXLAN vxlan.calico vni=4096 addr=10.65.0.1
  SyncVXLANPeers 0
  ReplaceRemoteRoute 10.65.1.1/32
  | bpfroute 10.65.0.0/16 flags=0x300 pool=2
  | bpfroute 10.65.1.0/26 flags=0x901 pool=2
  | bpfroute 10.65.1.1/32 flags=0x910 pool=2
  | kroute 10.65.1.1/32 dev #50
== node2's VTEP: its peer, then the block's route through it
  SetVXLANPeer 10.65.1.1
  ReplaceRemoteRoute 10.65.1.0/26
  | bpfroute 10.65.0.0/16 flags=0x300 pool=2
  | bpfroute 10.65.1.0/26 flags=0x901 pool=2
  | bpfroute 10.65.1.1/32 flags=0x910 pool=2
  | kroute 10.65.1.0/26 via 10.65.1.1 dev #50
  | kroute 10.65.1.1/32 dev #50
== end of the pass: the nat_outgoing table, collection
  SyncMasquerade [10.65.0.0/16] [10.65.0.0/16 10.65.1.0/26 10.65.1.1/32]
  | bpfroute 10.65.0.0/16 flags=0x300 pool=2
  | bpfroute 10.65.1.0/26 flags=0x901 pool=2
  | bpfroute 10.65.1.1/32 flags=0x910 pool=2
  | kroute 10.65.1.0/26 via 10.65.1.1 dev #50
  | kroute 10.65.1.1/32 dev #50
  | masquerade [10.65.0.0/16] [10.65.0.0/16 10.65.1.0/26 10.65.1.1/32]
== an unchanged pass: nothing
  | bpfroute 10.65.0.0/16 flags=0x300 pool=2
  | bpfroute 10.65.1.0/26 flags=0x901 pool=2
  | bpfroute 10.65.1.1/32 flags=0x910 pool=2
  | kroute 10.65.1.0/26 via 10.65.1.1 dev #50
  | kroute 10.65.1.1/32 dev #50
  | masquerade [10.65.0.0/16] [10.65.0.0/16 10.65.1.0/26 10.65.1.1/32]
== node2's VTEP goes: its peer and the block's route
  DeleteVXLANPeer 10.65.1.1
  DeleteRemoteRoute 10.65.1.0/26
  | bpfroute 10.65.0.0/16 flags=0x300 pool=2
  | bpfroute 10.65.1.0/26 flags=0x901 pool=2
  | bpfroute 10.65.1.1/32 flags=0x910 pool=2
  | kroute 10.65.1.1/32 dev #50
  | masquerade [10.65.0.0/16] [10.65.0.0/16 10.65.1.0/26 10.65.1.1/32]
== local VTEP goes: the device, and the routes through it with it
  DeleteVXLAN vxlan.calico
  | bpfroute 10.65.0.0/16 flags=0x300 pool=2
  | bpfroute 10.65.1.0/26 flags=0x901 pool=2
  | bpfroute 10.65.1.1/32 flags=0x910 pool=2
  | masquerade [10.65.0.0/16] [10.65.0.0/16 10.65.1.0/26 10.65.1.1/32]
== routes go; the next pass empties the table
  DeleteBPFRoute 10.65.1.1/32
  DeleteBPFRoute 10.65.1.0/26
  DeleteBPFRoute 10.65.0.0/16
  SyncMasquerade [] []
  | (nothing)
`

func errorsJoin(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// VTEPs and routes in any order end in one state.
func TestRoutesAndTunnelsAnyOrder(t *testing.T) {
	var want string
	for seed := range uint64(100) {
		f := newFakeKernel(t)
		k := f.kernel()
		steps := []func() error{
			func() error { return k.ApplyVTEP(vtepLocal) },
			func() error { return k.ApplyVTEP(vtepRemote) },
			func() error { return k.ApplyRoute(poolVX) },
			func() error { return k.ApplyRoute(blockNode2) },
			func() error { return k.ApplyRoute(tunnelNode2) },
		}
		rand.New(rand.NewPCG(seed, 1)).Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
		for _, s := range steps {
			if err := s(); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		if err := k.EndApply(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		got := f.dump()
		if want == "" {
			want = got
			t.Logf("programmed:\n%s", want)
		} else if got != want {
			t.Fatalf("seed %d ends elsewhere:\n%s\nwant:\n%s", seed, got, want)
		}
	}
	for _, l := range []string{"kroute 10.65.1.0/26 via 10.65.1.1 dev #50", "kroute 10.65.1.1/32 dev #50", "masquerade [10.65.0.0/16] [10.65.0.0/16 10.65.1.0/26 10.65.1.1/32]"} {
		if !containsLine(want, l) {
			t.Errorf("missing %q", l)
		}
	}
}

// Services: frontends point at a port id, its ready backends follow;
// a backend that leaves has its connections flushed at the end of the
// pass; a removed service's id is reused only after that flush.
func TestServicesGolden(t *testing.T) {
	f := newFakeKernel(t)
	k := f.kernel()
	tr := &transcript{f: f}
	svc := func(backends ...string) *model.Service {
		s := &model.Service{Key: model.ServiceKey{Namespace: "default", Name: "web"},
			ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
			Ports:      []model.ServicePort{{Protocol: model.ProtoTCP, Port: 80}}}
		for _, b := range backends {
			s.Backends = append(s.Backends, model.Backend{Addr: netip.MustParseAddr(b), Port: 80, Protocol: model.ProtoTCP, Ready: true})
		}
		return s
	}
	tr.step(t, "a service with two backends", func() error { return k.ApplyService(svc("10.0.0.1", "10.0.0.2")) })
	tr.step(t, "a backend leaves: rewritten, its connections flushed at the end", func() error {
		return errorsJoin(k.ApplyService(svc("10.0.0.2")), k.EndApply())
	})
	tr.step(t, "removal: frontend and backends, the service's connections", func() error {
		return errorsJoin(k.RemoveService(svc()), k.EndApply())
	})
	tr.check(t, goldenServices)
}

const goldenServices = `== a service with two backends
  ProgramNATPort 1 [6/10.96.0.10:80] -> [10.0.0.1:80 10.0.0.2:80]
  | natbe 1 [10.0.0.1:80 10.0.0.2:80]
  | natfe 6/10.96.0.10:80 -> 1
== a backend leaves: rewritten, its connections flushed at the end
  ProgramNATPort 1 [6/10.96.0.10:80] -> [10.0.0.2:80]
  SyncMasquerade [] []
  FlushNATFlows backend 1/10.0.0.1:80
  | natbe 1 [10.0.0.2:80]
  | natfe 6/10.96.0.10:80 -> 1
== removal: frontend and backends, the service's connections
  DeleteNATFrontend 6/10.96.0.10:80
  DeleteNATPort 1
  FlushNATFlows service 1
  | (nothing)
`

func containsLine(text, line string) bool {
	for _, l := range splitLines(text) {
		if l == line {
			return true
		}
	}
	return false
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
