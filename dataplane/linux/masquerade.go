package linux

import (
	"fmt"
	"net/netip"
	"slices"
)

// masqProgrammer writes the nat_outgoing table from the IP pools: once
// per apply pass at most, and only when the pools differ from what it
// last wrote. Called under Kernel.mu.
type masqProgrammer struct {
	net       masqNet
	done      bool // the table was written at least once
	masqPools []netip.Prefix
	allPools  []netip.Prefix
}

// sync makes the table hold masq (pools with NAT outgoing) within all.
func (m *masqProgrammer) sync(masq, all []netip.Prefix) error {
	if m.done && slices.Equal(masq, m.masqPools) && slices.Equal(all, m.allPools) {
		return nil
	}
	if err := m.net.SyncMasquerade(masq, all); err != nil {
		return fmt.Errorf("nat outgoing: %w", err)
	}
	m.masqPools, m.allPools, m.done = masq, all, true
	return nil
}
