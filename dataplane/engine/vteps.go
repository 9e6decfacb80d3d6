package engine

import (
	"bytes"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// newVTEPManager tracks nodes' VXLAN tunnel endpoints, applied after host
// metadata and before the routes that use them.
func newVTEPManager() *objectManager[string, model.VTEP] {
	return newObjectManager("vtep",
		func(a, b *model.VTEP) bool {
			return a.Node == b.Node && bytes.Equal(a.MAC, b.MAC) &&
				a.IPv4Addr == b.IPv4Addr && a.ParentDeviceIP == b.ParentDeviceIP &&
				bytes.Equal(a.MACV6, b.MACV6) && a.IPv6Addr == b.IPv6Addr && a.ParentDeviceIPv6 == b.ParentDeviceIPv6
		},
		func(k string) string { return k })
}

func (e *Engine) onVTEPUpdate(u *model.VTEPUpdate) {
	v := u.VTEP
	e.vteps.set(v.Node, &v)
}

func (e *Engine) onVTEPRemove(r *model.VTEPRemove) {
	e.vteps.del(r.Node)
}
