package tcbpf

import (
	"fmt"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestObservedCosts: every real attach and detach is counted under the mode
// it used, so the figures reflect what the endpoints paid.
func TestObservedCosts(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			d := openTest(t, Options{ForceLegacyTC: legacy})
			host, _ := vethPair(t)
			l, err := netlink.LinkByIndex(host)
			mustNil(t, err)
			name := l.Attrs().Name
			mode, err := d.Attach(host, name)
			mustNil(t, err)
			mustNil(t, d.Detach(host, name))
			got := d.ObservedCosts()
			want := ObservedCosts{Detach: OpCost{Count: 1}}
			if mode == AttachTC {
				want.TCAttach.Count = 1
			} else {
				want.TCXAttach.Count = 1
			}
			if got.TCXAttach.Count != want.TCXAttach.Count || got.TCAttach.Count != want.TCAttach.Count || got.Detach.Count != 1 {
				t.Fatalf("observed %+v after one %s attach and one detach", got, mode)
			}
			if got.Detach.Total <= 0 || got.TCXAttach.Total+got.TCAttach.Total <= 0 {
				t.Fatalf("costs not accumulated: %+v", got)
			}
		})
	}
}
