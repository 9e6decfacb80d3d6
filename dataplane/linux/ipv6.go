package linux

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// endpointNets is every net of ep, both families: the netlink side routes
// and pins each family it programs (IPv6 only on a node that has it).
func endpointNets(ep *model.Endpoint) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ep.IPv4Nets)+len(ep.IPv6Nets))
	return append(append(out, ep.IPv4Nets...), ep.IPv6Nets...)
}

// logIPv6State says once, at start, when the node has no IPv6: endpoints'
// IPv6 nets, IPv6 routes and the ip6 nat_outgoing table are then not
// programmed, and IPv4 works as on any node. The line tells an operator of
// a dual-stack cluster why this node's IPv6 endpoints get no IPv6
// connectivity. It never fails the start.
func logIPv6State(log *slog.Logger, cfg *nl.Configurer) {
	on, reason, err := cfg.IPv6State()
	switch {
	case err != nil:
		log.Warn("cannot tell whether IPv6 is enabled: IPv6 programming is off", "err", err)
	case !on:
		log.Info("IPv6 is disabled on this node: IPv6 programming is off", "reason", reason)
	}
}

// syncIPv6RPFLocked writes the IPv6 source check for the workload
// interface prefixes (nl.Configurer.SyncIPv6RPF) when they changed; the
// table outlives a restart, so until the first Configure the one an
// earlier dpd wrote stays in force.
func (k *Kernel) syncIPv6RPFLocked(prefixes []string) error {
	if k.cfg == nil || (k.rpfDone && slices.Equal(prefixes, k.rpfPrefixes)) {
		return nil
	}
	if err := k.cfg.SyncIPv6RPF(prefixes); err != nil {
		return fmt.Errorf("ipv6 source check: %w", err)
	}
	k.rpfPrefixes, k.rpfDone = slices.Clone(prefixes), true
	return nil
}
