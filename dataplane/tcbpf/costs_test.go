package tcbpf

import (
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/internal/testutil"
)

func TestMeasureKernelCosts(t *testing.T) {
	testutil.RequirePrivileged(t)
	c, err := MeasureKernelCosts()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel costs: tcx first attach %s, next attach %s, last detach %s; legacy attach %s; program load %s; map update %s (tcx err %v)",
		c.TCXFirstAttach, c.TCXNextAttach, c.TCXLastDetach, c.LegacyAttach, c.ProgramLoad, c.MapUpdate, c.TCXErr)
	if c.LegacyAttach <= 0 || c.ProgramLoad <= 0 || c.MapUpdate <= 0 {
		t.Fatalf("unmeasured costs: %+v", c)
	}
	if c.TCXErr == nil && (c.TCXFirstAttach <= 0 || c.TCXNextAttach <= 0 || c.TCXLastDetach <= 0) {
		t.Fatalf("unmeasured TCX costs: %+v", c)
	}
	if _, err := netlink.LinkByName(probeDevice); err == nil {
		t.Fatalf("%s left behind", probeDevice)
	}
	choice := chooseFromCosts(c)
	t.Logf("auto attach mode here: %s (%s)", choice.Mode, choice.Reason)
}
