package nl

import (
	"net"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// stateOf classifies a link as the engine needs it: up means administratively
// up AND operationally up or unknown. A veth host side whose peer is down
// reports oper state lowerlayerdown and is therefore down; dummies and some
// virtual devices never leave "unknown", which counts as up.
func stateOf(attrs *netlink.LinkAttrs) model.LinkState {
	if attrs.Flags&net.FlagUp == 0 {
		return model.LinkDown
	}
	switch attrs.OperState {
	case netlink.OperUp, netlink.OperUnknown:
		return model.LinkUp
	}
	return model.LinkDown
}
