// Package nl is dpd's netlink side of the Linux dataplane: it watches
// workload interfaces and programs what a Calico-style routed workload needs
// on the host, without any BPF.
//
//   - Monitor follows links through a netlink subscription plus a periodic
//     full resync (which repairs missed events), keeps a name -> state/ifindex
//     cache, and reports model.LinkUpdate for names matching the workload
//     interface prefixes (Felix's InterfacePrefix, e.g. "cali,tap").
//   - Configurer writes host sysctls (ip_forward, and IPv6 forwarding on a
//     node with IPv6), and per endpoint the host-side veth sysctls (proxy
//     ARP, forwarding, rp_filter, and for IPv6 forwarding, proxy_ndp,
//     accept_ra=0, disable_ipv6=0), a /32 route per IPv4 address and a
//     /128 route per IPv6 address, and a permanent neighbour entry per
//     address for the workload's MAC. The workload's IPv6 gateway is the
//     host side's own link-local address (fe80::ecee:eeff:feee:eeee with
//     Calico's CNI plugin). On a node without IPv6 (IPv6State) nothing
//     IPv6 is programmed. It compares desired with actual kernel state and writes
//     only differences (ConfigureEndpoint), or, for an interface that has
//     just appeared, writes without reading (ConfigureNewEndpoint), counting
//     every kernel write in Stats. Where it reads, the kernel filters the
//     dumps by interface (strict checking, NDA_IFINDEX), so a read costs
//     the same whatever the number of endpoints.
//
// Route ownership: every route dpd creates carries the route protocol
// RouteProtocol (0xdd = 221, "dpd"; `ip route show proto 221`). It is not in
// iproute2's rt_protos, and deliberately not 0x50 (80), which Calico uses for
// its own routes, so dpd's garbage collection (ListDpdRoutes/DeleteRoute)
// can never remove a route that another agent owns.
//
// Both types keep persistent netlink handles; close them with Close.
package nl
