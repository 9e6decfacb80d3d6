package felixconv

import (
	"errors"
	"fmt"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// Route parses a RouteUpdate: dst is a CIDR (or bare address), dst_node_ip
// an address when present, types a non-negative RouteType bitmap and
// ip_pool_type one of the known pool types.
func Route(r *felix.RouteUpdate) (model.Route, error) {
	if r == nil {
		return model.Route{}, errors.New("nil route")
	}
	dst, err := parsePrefix(r.Dst)
	if err != nil {
		return model.Route{}, fmt.Errorf("dst: %w", err)
	}
	if r.Types < 0 {
		return model.Route{}, fmt.Errorf("types bitmap %d is negative", r.Types)
	}
	switch r.IpPoolType {
	case felix.IPPoolType_NONE, felix.IPPoolType_NO_ENCAP, felix.IPPoolType_VXLAN, felix.IPPoolType_IPIP:
	default:
		return model.Route{}, fmt.Errorf("unknown ip_pool_type %d", r.IpPoolType)
	}
	nodeIP, err := optAddr("dst_node_ip", r.DstNodeIp)
	if err != nil {
		return model.Route{}, err
	}
	return model.Route{
		Dst:           dst,
		Types:         uint32(r.Types),
		PoolType:      uint8(r.IpPoolType),
		DstNodeName:   r.DstNodeName,
		DstNodeIP:     nodeIP,
		SameSubnet:    r.SameSubnet,
		NATOutgoing:   r.NatOutgoing,
		LocalWorkload: r.LocalWorkload,
		TunnelVXLAN:   r.GetTunnelType().GetVxlan(),
		TunnelIPIP:    r.GetTunnelType().GetIpip(),
	}, nil
}
