package engine

import (
	"bytes"
	"errors"
	"fmt"
	"net"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// newVTEPManager tracks nodes' VXLAN tunnel endpoints, applied after host
// metadata and before the routes that use them.
func newVTEPManager() *objectManager[string, model.VTEP] {
	return newObjectManager("vtep",
		func(a, b *model.VTEP) bool {
			return a.Node == b.Node && bytes.Equal(a.MAC, b.MAC) &&
				a.IPv4Addr == b.IPv4Addr && a.ParentDeviceIP == b.ParentDeviceIP
		},
		func(k string) string { return k })
}

func (e *Engine) onVTEPUpdate(u *felix.VXLANTunnelEndpointUpdate) error {
	if u.GetNode() == "" {
		return errors.New("vtep update without node")
	}
	v := model.VTEP{Node: u.GetNode()}
	var err error
	if u.GetMac() != "" {
		if v.MAC, err = net.ParseMAC(u.GetMac()); err != nil {
			return fmt.Errorf("vtep %s mac: %w", v.Node, err)
		}
	}
	if v.IPv4Addr, err = hostAddr(u.GetIpv4Addr()); err != nil {
		return fmt.Errorf("vtep %s ipv4_addr: %w", v.Node, err)
	}
	if v.ParentDeviceIP, err = hostAddr(u.GetParentDeviceIp()); err != nil {
		return fmt.Errorf("vtep %s parent_device_ip: %w", v.Node, err)
	}
	e.vteps.set(v.Node, &v)
	return nil
}

func (e *Engine) onVTEPRemove(r *felix.VXLANTunnelEndpointRemove) error {
	if r.GetNode() == "" {
		return errors.New("vtep remove without node")
	}
	e.vteps.del(r.GetNode())
	return nil
}
