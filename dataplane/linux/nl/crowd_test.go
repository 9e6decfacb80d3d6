package nl

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// A crowded namespace: one endpoint veth plus a device carrying n /32
// routes and n permanent neighbours, which is what n other endpoints look
// like to a route or neighbour dump. Everything lives in a namespace of the
// test's own, so nothing it does is seen by other tests or a running dpd.

const (
	crowdEndpoint   = "ep0"
	crowdEndpointIP = "10.200.0.1"
	crowdDevice     = "crowd0"
)

// crowdAddr is the i'th address of the crowd, 10.201.0.1 onwards.
func crowdAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 201, byte(i / 250), byte(i%250 + 1)})
}

// crowdNS builds the namespace with n crowd routes and neighbours and
// returns it with the endpoint's ifindex and its peer's MAC.
func crowdNS(tb testing.TB, n int) (ns string, ifindex int, mac net.HardwareAddr) {
	tb.Helper()
	ns = namedNetns(tb, "c")
	var b strings.Builder
	fmt.Fprintf(&b, "link add %s type veth peer name %sp\n", crowdEndpoint, crowdEndpoint)
	fmt.Fprintf(&b, "link add %s type veth peer name %sp\n", crowdDevice, crowdDevice)
	for _, l := range []string{crowdEndpoint, crowdEndpoint + "p", crowdDevice, crowdDevice + "p"} {
		fmt.Fprintf(&b, "link set %s up\n", l)
	}
	for i := range n {
		a := crowdAddr(i)
		fmt.Fprintf(&b, "route add %s/32 dev %s scope link proto static\n", a, crowdDevice)
		fmt.Fprintf(&b, "neigh add %s lladdr 02:00:00:00:%02x:%02x nud permanent dev %s\n",
			a, i/256, i%256, crowdDevice)
	}
	batch := filepath.Join(tb.TempDir(), "crowd.batch")
	if err := os.WriteFile(batch, []byte(b.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	testutil.Run(tb, "ip", "-n", ns, "-batch", batch)
	ifindex = nsLinkTB(tb, ns, crowdEndpoint).Attrs().Index
	mac = nsLinkTB(tb, ns, crowdEndpoint+"p").Attrs().HardwareAddr
	return ns, ifindex, mac
}

// crowdIndex is the ifindex of the crowd device in ns.
func crowdIndex(tb testing.TB, ns string) int {
	tb.Helper()
	return nsLinkTB(tb, ns, crowdDevice).Attrs().Index
}
