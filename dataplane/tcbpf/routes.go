package tcbpf

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

type (
	routeKey = bpf.DpdDpdRouteKey
	routeVal = bpf.DpdDpdRouteVal
)

// RouteInfo is what the programs know of a destination CIDR (dpd_routes).
type RouteInfo struct {
	Flags    uint32     // abi.RT*: felix RouteType bits plus dpd's
	PoolType uint8      // felix IPPoolType
	NextHop  netip.Addr // the destination node's IP; invalid when none
}

func routeKeyOf(dst netip.Prefix) (routeKey, error) {
	dst = dst.Masked()
	if !dst.Addr().Is4() {
		return routeKey{}, fmt.Errorf("route %s: only IPv4 is programmed", dst)
	}
	a := dst.Addr().As4()
	k := routeKey{Prefixlen: uint32(abi.RouteKeyFixedBits + dst.Bits()), Family: 4}
	copy(k.Addr[:], a[:])
	return k, nil
}

// SetRoute writes dst's entry.
func (d *Datapath) SetRoute(dst netip.Prefix, info RouteInfo) error {
	k, err := routeKeyOf(dst)
	if err != nil {
		return err
	}
	v := routeVal{Flags: info.Flags, PoolType: info.PoolType}
	if info.NextHop.Is4() {
		a := info.NextHop.As4()
		copy(v.NextHop[:], a[:])
	}
	if err := d.objs.DpdRoutes.Update(&k, &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set route %s: %w", dst, err)
	}
	return nil
}

// DeleteRoute removes dst's entry; absent is not an error.
func (d *Datapath) DeleteRoute(dst netip.Prefix) error {
	k, err := routeKeyOf(dst)
	if err != nil {
		return err
	}
	err = d.objs.DpdRoutes.Delete(&k)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete route %s: %w", dst, err)
	}
	return nil
}

// LookupRoute returns the longest entry covering addr, as the programs see
// it.
func (d *Datapath) LookupRoute(addr netip.Addr) (RouteInfo, bool, error) {
	k, err := routeKeyOf(netip.PrefixFrom(addr, addr.BitLen()))
	if err != nil {
		return RouteInfo{}, false, err
	}
	var v routeVal
	err = d.objs.DpdRoutes.Lookup(&k, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return RouteInfo{}, false, nil
	}
	if err != nil {
		return RouteInfo{}, false, fmt.Errorf("look up route %s: %w", addr, err)
	}
	return routeInfoOf(&v), true, nil
}

func routeInfoOf(v *routeVal) RouteInfo {
	info := RouteInfo{Flags: v.Flags, PoolType: v.PoolType}
	if v.NextHop != [16]uint8{} {
		info.NextHop = addrOf16(v.NextHop, false)
	}
	return info
}

// Routes lists every entry of dpd_routes.
func (d *Datapath) Routes() (map[netip.Prefix]RouteInfo, error) {
	var (
		k routeKey
		v routeVal
	)
	out := map[netip.Prefix]RouteInfo{}
	it := d.objs.DpdRoutes.Iterate()
	for it.Next(&k, &v) {
		if k.Family != 4 || k.Prefixlen < abi.RouteKeyFixedBits {
			continue
		}
		p := netip.PrefixFrom(addrOf16(k.Addr, false), int(k.Prefixlen-abi.RouteKeyFixedBits))
		out[p] = routeInfoOf(&v)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	return out, nil
}
