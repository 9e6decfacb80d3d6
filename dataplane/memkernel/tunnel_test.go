package memkernel_test

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
)

func TestTunnelRecords(t *testing.T) {
	k := memkernel.New()
	mac, _ := net.ParseMAC("66:00:00:00:00:02")
	v := &model.VTEP{Node: "n2", MAC: mac, IPv4Addr: netip.MustParseAddr("10.65.1.0"), ParentDeviceIP: netip.MustParseAddr("192.168.0.2")}
	if err := k.ApplyVTEP(v); err != nil {
		t.Fatal(err)
	}
	mac[0] = 0 // the kernel keeps its own copy
	if got := k.VTEPs(); len(got) != 1 || got[0].MAC.String() != "66:00:00:00:00:02" || got[0].ParentDeviceIP != v.ParentDeviceIP {
		t.Fatalf("vteps %+v", got)
	}
	if err := k.RemoveVTEP("n2"); err != nil || len(k.VTEPs()) != 0 {
		t.Fatalf("remove: %v, left %+v", err, k.VTEPs())
	}
	h := &model.HostMetadata{Hostname: "n2", IPv4Addr: netip.MustParseAddr("192.168.0.2")}
	if err := k.ApplyHostMetadata(h); err != nil {
		t.Fatal(err)
	}
	if got, ok := k.HostMetadata("n2"); !ok || got != *h {
		t.Fatalf("host metadata %+v %v", got, ok)
	}
	k.FailNext(memkernel.MethodRemoveHostMetadata, errors.New("boom"))
	if err := k.RemoveHostMetadata("n2"); err == nil {
		t.Fatal("injected failure not returned")
	}
	if err := k.RemoveHostMetadata("n2"); err != nil {
		t.Fatal(err)
	}
	if _, ok := k.HostMetadata("n2"); ok {
		t.Fatal("host metadata still recorded")
	}
}
