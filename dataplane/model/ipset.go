package model

import "net/netip"

// IPSetType mirrors felix.IPSetUpdate.IPSetType.
type IPSetType uint8

const (
	IPSetIP        IPSetType = 0 // members are addresses
	IPSetIPAndPort IPSetType = 1 // members are "addr,proto:port"
	IPSetNet       IPSetType = 2 // members are CIDRs
)

// IPSetMember is one parsed member. Addresses are full-length prefixes;
// Proto and Port are set only for IPSetIPAndPort.
type IPSetMember struct {
	Prefix netip.Prefix
	Proto  uint8
	Port   uint16
}
