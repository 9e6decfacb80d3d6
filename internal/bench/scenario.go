package bench

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/dpd-dev/dpd/proto/felix"
)

// This file names the driver's objects and builds the ToDataplane messages
// that describe them. Everything is deterministic in (batch, index), so a
// phase can rebuild any message without keeping state.

// Batches of workloads. Each phase that creates endpoints gets its own
// interfaces, addresses and ids, so no phase depends on what an earlier one
// left behind.
const (
	batchColdStart = 'a' // P3's endpoints, later P2's
	batchOwnPolicy = 'b' // P1 with a policy of their own per endpoint
	batchShared    = 'c' // P1 with the one shared policy
)

const (
	k8sNamespace = "bench"
	tierName     = "default"
	profileName  = "kns.bench"
	sharedPolicy = "shared"
	// flipPort is the TCP port whose verdict P2's policy change flips.
	flipPort = 7777
)

// ifaceName is the host side of a workload veth: the Calico prefix "cali",
// as dpd watches by default, then the batch and index.
func ifaceName(batch byte, i int) string { return fmt.Sprintf("cali%c%05d", batch, i) }

// peerName is the workload side; it stays in the node namespace under a
// name dpd does not watch.
func peerName(batch byte, i int) string { return fmt.Sprintf("bp%c%05d", batch, i) }

// peerMAC is a locally administered unicast address per workload.
func peerMAC(batch byte, i int) net.HardwareAddr {
	return net.HardwareAddr{0x0e, 0xbe, batch, byte(i >> 16), byte(i >> 8), byte(i)}
}

// endpointIP is 10.64+x.y.z: one /16 per batch.
func endpointIP(batch byte, i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 64 + (batch - 'a'), byte(i >> 8), byte(i)})
}

func workloadID(batch byte, i int) *felix.WorkloadEndpointID {
	return &felix.WorkloadEndpointID{
		OrchestratorId: "k8s",
		WorkloadId:     fmt.Sprintf("%s/%c%05d", k8sNamespace, batch, i),
		EndpointId:     "eth0",
	}
}

// endpointKey is dpd's spelling of an endpoint id (Inspect, Trace).
func endpointKey(id *felix.WorkloadEndpointID) string {
	return id.GetOrchestratorId() + "/" + id.GetWorkloadId() + "/" + id.GetEndpointId()
}

func setID(j int) string { return fmt.Sprintf("s:bench-%03d", j) }

// setMembers are n addresses from 10.128.0.0/9, distinct across sets.
func setMembers(j, n int) []string {
	out := make([]string, n)
	var b [4]byte
	for m := range n {
		binary.BigEndian.PutUint32(b[:], uint32(10<<24|128<<16)+uint32(j*n+m))
		out[m] = netip.AddrFrom4(b).String()
	}
	return out
}

func policyName(p int) string { return fmt.Sprintf("pol-%04d", p) }

func policyID(name string) *felix.PolicyID {
	return &felix.PolicyID{Name: name, Namespace: k8sNamespace, Kind: "NetworkPolicy"}
}

func tcp() *felix.Protocol { return &felix.Protocol{NumberOrName: &felix.Protocol_Name{Name: "tcp"}} }
func udp() *felix.Protocol { return &felix.Protocol{NumberOrName: &felix.Protocol_Name{Name: "udp"}} }
func port(p int32) *felix.PortRange {
	return &felix.PortRange{First: p, Last: p}
}

// ipSetUpdate replaces set j with members.
func ipSetUpdate(j int, members []string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{
		Id: setID(j), Type: felix.IPSetUpdate_IP, Members: members,
	}}}
}

// profile is the namespace profile every workload carries; Calico's allow
// everything the tiers did not decide.
func profile() *felix.ToDataplane {
	allow := []*felix.Rule{{Action: "allow"}}
	return &felix.ToDataplane{Payload: &felix.ToDataplane_ActiveProfileUpdate{ActiveProfileUpdate: &felix.ActiveProfileUpdate{
		Id: &felix.ProfileID{Name: profileName}, Profile: &felix.Profile{InboundRules: allow, OutboundRules: allow},
	}}}
}

// ownPolicy p is the kind of policy an application namespace carries: a
// few rules, one of them on an IP set, in both directions, so every policy
// compiles to programs of its own.
func ownPolicy(p, sets int) *felix.ToDataplane {
	in := []*felix.Rule{
		{Action: "allow", Protocol: tcp(), DstPorts: []*felix.PortRange{port(80)}, SrcIpSetIds: []string{setID(p % sets)}},
		{Action: "allow", Protocol: tcp(), DstPorts: []*felix.PortRange{{First: 8000, Last: 8100}},
			SrcNet: []string{fmt.Sprintf("10.200.%d.0/24", p%256)}},
		{Action: "deny", Protocol: udp(), DstPorts: []*felix.PortRange{port(int32(1000 + p%60000))}},
	}
	out := []*felix.Rule{
		{Action: "allow", Protocol: tcp(), DstPorts: []*felix.PortRange{port(5432)}, DstIpSetIds: []string{setID((p + 1) % sets)}},
		{Action: "allow", Protocol: udp(), DstPorts: []*felix.PortRange{port(53)}},
	}
	return policyUpdate(policyName(p), in, out)
}

// sharedPolicyUpdate is the policy every endpoint of P2 uses. Its first
// inbound rule decides TCP to flipPort: deny, or allow once flipped.
func sharedPolicyUpdate(flipped bool) *felix.ToDataplane {
	action := "deny"
	if flipped {
		action = "allow"
	}
	in := []*felix.Rule{
		{Action: action, Protocol: tcp(), DstPorts: []*felix.PortRange{port(flipPort)}},
		{Action: "allow", Protocol: tcp(), DstPorts: []*felix.PortRange{port(80)}, SrcIpSetIds: []string{setID(0)}},
	}
	out := []*felix.Rule{{Action: "allow"}}
	return policyUpdate(sharedPolicy, in, out)
}

func policyUpdate(name string, in, out []*felix.Rule) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{
		Id:     policyID(name),
		Policy: &felix.Policy{InboundRules: in, OutboundRules: out, Namespace: k8sNamespace, Tier: tierName},
	}}}
}

// endpointUpdate describes workload (batch, i) on its veth, enforcing
// policy in both directions, then the namespace profile.
func endpointUpdate(batch byte, i int, policy string) *felix.ToDataplane {
	pid := policyID(policy)
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
		Id: workloadID(batch, i),
		Endpoint: &felix.WorkloadEndpoint{
			State:      "active",
			Name:       ifaceName(batch, i),
			Mac:        peerMAC(batch, i).String(),
			ProfileIds: []string{profileName},
			Ipv4Nets:   []string{endpointIP(batch, i).String() + "/32"},
			Tiers: []*felix.TierInfo{{
				Name: tierName, IngressPolicies: []*felix.PolicyID{pid}, EgressPolicies: []*felix.PolicyID{pid},
			}},
		},
	}}}
}

func endpointRemove(batch byte, i int) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: &felix.WorkloadEndpointRemove{
		Id: workloadID(batch, i),
	}}}
}

// policyState is every IP set, the profile, the shared policy and the
// scale's own policies: what the controller has before any endpoint.
func policyState(s Scale) []*felix.ToDataplane {
	msgs := make([]*felix.ToDataplane, 0, s.IPSets+s.Policies+2)
	for j := range s.IPSets {
		msgs = append(msgs, ipSetUpdate(j, setMembers(j, s.SetMembers)))
	}
	msgs = append(msgs, profile(), sharedPolicyUpdate(false))
	for p := range s.Policies {
		msgs = append(msgs, ownPolicy(p, s.IPSets))
	}
	return msgs
}
