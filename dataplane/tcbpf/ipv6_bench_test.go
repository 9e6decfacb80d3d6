package tcbpf

import (
	"testing"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// BenchmarkEntry6 is BenchmarkEntry's cases for IPv6 packets (no
// extension headers): an established flow, a reply, and a new flow to a
// deny policy.
func BenchmarkEntry6(b *testing.B) {
	d := openTest(b, Options{})
	waitClockCalibrated(b, d)
	mustNil(b, d.SetIfState(1, 0, abi.IfReady))
	mustNil(b, d.InstallPolicy(0, abi.DirFromWEP, verdictProg(b, d, abi.VerdictAllow, 0)))
	mustNil(b, d.InstallPolicy(0, abi.DirToWEP, verdictProg(b, d, abi.VerdictDeny, 0)))
	mustNil(b, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(b, d, abi.VerdictDeny, 0)))
	a, z := ap6(ip6A, 40000), ap6(ip6B, 80)
	flow := tcp6(a, z, tcpACK)
	if ret, _, err := d.Programs().FromWEP.Test(flow); err != nil || ret != abi.TCActOK {
		b.Fatalf("seeding the flow: %d %v", ret, err)
	}
	runRepeated(b, d, []benchCase{
		{"trivial", trivialProg(b), flow, 0, abi.TCActOK},
		{"ct_hit", d.Programs().FromWEP, flow, 0, abi.TCActOK},
		{"ct_reply", d.Programs().ToWEP, tcp6(z, a, tcpACK), 0, abi.TCActOK},
		{"policy_deny", d.Programs().FromWEP, udp6(ap6(ip6A, 7), ap6(ip6B, 7)), 1, abi.TCActShot},
	})
}
