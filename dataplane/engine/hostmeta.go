package engine

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// newHostMetaManager tracks node addresses (HostMetadataUpdate), applied
// after endpoints and before routes, which may need them to reach a node.
func newHostMetaManager() *objectManager[string, model.HostMetadata] {
	return newObjectManager("host_metadata",
		func(a, b *model.HostMetadata) bool { return *a == *b },
		func(k string) string { return k })
}

func (e *Engine) onHostMetadataUpdate(u *felix.HostMetadataUpdate) error {
	if u.GetHostname() == "" {
		return errors.New("host metadata without hostname")
	}
	h := model.HostMetadata{Hostname: u.GetHostname()}
	var err error
	if h.IPv4Addr, err = hostAddr(u.GetIpv4Addr()); err != nil {
		return fmt.Errorf("host %s ipv4_addr: %w", h.Hostname, err)
	}
	if h.IPv6Addr, err = hostAddr(u.GetIpv6Addr()); err != nil {
		return fmt.Errorf("host %s ipv6_addr: %w", h.Hostname, err)
	}
	e.hostMeta.set(h.Hostname, &h)
	return nil
}

func (e *Engine) onHostMetadataRemove(r *felix.HostMetadataRemove) error {
	if r.GetHostname() == "" {
		return errors.New("host metadata remove without hostname")
	}
	e.hostMeta.del(r.GetHostname())
	return nil
}

// hostAddr reads an optional node address given as "addr" or "addr/len"
// (Node resources store BGP addresses as CIDRs), as felixconv validates it.
func hostAddr(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	s, _, _ = strings.Cut(s, "/")
	return netip.ParseAddr(s)
}
