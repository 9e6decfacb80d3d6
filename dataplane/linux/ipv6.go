package linux

import (
	"log/slog"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
)

// logIPv6State says once, at start, when the node has no IPv6. dpd
// programs IPv4 only today, so an IPv4-only node loses nothing; the line
// tells an operator of a dual-stack cluster why this node's IPv6 endpoints
// get no IPv6 connectivity. It never fails the start.
func logIPv6State(log *slog.Logger, cfg *nl.Configurer) {
	on, reason, err := cfg.IPv6State()
	switch {
	case err != nil:
		log.Warn("cannot tell whether IPv6 is enabled: IPv6 programming is off", "err", err)
	case !on:
		log.Info("IPv6 is disabled on this node: IPv6 programming is off", "reason", reason)
	}
}
