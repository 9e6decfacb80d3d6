package felixconv

import (
	"fmt"
	"testing"

	"github.com/dpd-dev/dpd/proto/felix"
)

// BenchmarkTranslate is the edge's cost per message of the server's
// ingest benchmark (a workload endpoint update, then an IP set delta).
func BenchmarkTranslate(b *testing.B) {
	msgs := make([]*felix.ToDataplane, 0, 2000)
	for i := range 1000 {
		msgs = append(msgs,
			&felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
				Id: &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: fmt.Sprintf("bench/w%d", i), EndpointId: "eth0"},
				Endpoint: &felix.WorkloadEndpoint{State: "active", Name: fmt.Sprintf("cali-b%d", i),
					Ipv4Nets: []string{fmt.Sprintf("10.100.%d.%d/32", i/256, i%256)}, ProfileIds: []string{"kns.bench"}},
			}}},
			&felix.ToDataplane{Payload: &felix.ToDataplane_IpsetDeltaUpdate{IpsetDeltaUpdate: &felix.IPSetDeltaUpdate{
				Id: "s:bench", AddedMembers: []string{fmt.Sprintf("10.101.%d.%d", i/256, i%256)}}}})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := Translate(msgs[i%len(msgs)]); err != nil {
			b.Fatal(err)
		}
	}
}
