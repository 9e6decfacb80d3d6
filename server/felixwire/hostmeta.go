package felixwire

import (
	"maps"

	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/proto/felixlegacy"
)

// hostMeta folds the older per-family host metadata messages into the
// current HostMetadataUpdate/Remove, which carry (and replace) a host's
// whole record. Older Felix sends, for one host, HostMetadataUpdate (14,
// IPv4 only), HostMetadataV6Update (35) and HostMetadataV4V6Update (37,
// everything); passed on as they are, each would wipe what the others set.
// So a session that has sent any of 35-38 is older for host metadata, and
// from then on every part updates its own fields of the record kept here.
type hostMeta struct {
	legacy bool // the session sent 35-38: a 14 is IPv4 only
	hosts  map[string]*felix.HostMetadataUpdate
}

func (h *hostMeta) record(name string) *felix.HostMetadataUpdate {
	if h.hosts == nil {
		h.hosts = map[string]*felix.HostMetadataUpdate{}
	}
	r := h.hosts[name]
	if r == nil {
		r = &felix.HostMetadataUpdate{Hostname: name}
		h.hosts[name] = r
	}
	return r
}

// update sets out's payload to a copy of r.
func update(out *felix.ToDataplane, r *felix.HostMetadataUpdate) {
	u := &felix.HostMetadataUpdate{Hostname: r.Hostname, Ipv4Addr: r.Ipv4Addr, Ipv6Addr: r.Ipv6Addr,
		Asnumber: r.Asnumber, Labels: maps.Clone(r.Labels)}
	out.Payload = &felix.ToDataplane_HostMetadataUpdate{HostMetadataUpdate: u}
}

func removal(out *felix.ToDataplane, name string) {
	out.Payload = &felix.ToDataplane_HostMetadataRemove{HostMetadataRemove: &felix.HostMetadataRemove{Hostname: name}}
}

// empty reports whether nothing but the name is left of r.
func empty(r *felix.HostMetadataUpdate) bool {
	return r.Ipv4Addr == "" && r.Ipv6Addr == "" && r.Asnumber == "" && len(r.Labels) == 0
}

// current records a current-form 14 or 18: before the session showed it is
// older, they are whole records.
func (h *hostMeta) current(msg *felix.ToDataplane) {
	switch p := msg.Payload.(type) {
	case *felix.ToDataplane_HostMetadataUpdate:
		if h.legacy {
			return
		}
		u := p.HostMetadataUpdate
		r := h.record(u.GetHostname())
		r.Ipv4Addr, r.Ipv6Addr, r.Asnumber, r.Labels = u.GetIpv4Addr(), u.GetIpv6Addr(), u.GetAsnumber(), maps.Clone(u.GetLabels())
	case *felix.ToDataplane_HostMetadataRemove:
		if !h.legacy {
			delete(h.hosts, p.HostMetadataRemove.GetHostname())
		}
	}
}

// v4 applies an older HostMetadataUpdate (14): the IPv4 address only.
func (h *hostMeta) v4(u *felixlegacy.HostMetadataUpdate, out *felix.ToDataplane) {
	r := h.record(u.GetHostname())
	r.Ipv4Addr = u.GetIpv4Addr()
	update(out, r)
}

// v4Remove applies HostMetadataRemove (18) in an older session: the IPv4
// address went; the host goes when nothing else is left of it.
func (h *hostMeta) v4Remove(rm *felix.HostMetadataRemove, out *felix.ToDataplane) {
	h.forget(rm.GetHostname(), func(r *felix.HostMetadataUpdate) { r.Ipv4Addr = "" }, out)
}

func (h *hostMeta) v6(u *felixlegacy.HostMetadataV6Update, out *felix.ToDataplane) {
	r := h.record(u.GetHostname())
	r.Ipv6Addr = u.GetIpv6Addr()
	update(out, r)
}

func (h *hostMeta) v6Remove(rm *felixlegacy.HostMetadataV6Remove, out *felix.ToDataplane) {
	h.forget(rm.GetHostname(), func(r *felix.HostMetadataUpdate) { r.Ipv6Addr = "" }, out)
}

// forget clears one family's address of a host (unset); the host goes when
// nothing else is left of it, and an unknown host is removed as asked.
func (h *hostMeta) forget(name string, unset func(*felix.HostMetadataUpdate), out *felix.ToDataplane) {
	r := h.hosts[name]
	if r == nil {
		removal(out, name)
		return
	}
	unset(r)
	if empty(r) {
		delete(h.hosts, name)
		removal(out, name)
		return
	}
	update(out, r)
}

func (h *hostMeta) v4v6(u *felixlegacy.HostMetadataV4V6Update, out *felix.ToDataplane) {
	r := h.record(u.GetHostname())
	r.Ipv4Addr, r.Ipv6Addr, r.Asnumber, r.Labels = u.GetIpv4Addr(), u.GetIpv6Addr(), u.GetAsnumber(), maps.Clone(u.GetLabels())
	update(out, r)
}

func (h *hostMeta) v4v6Remove(rm *felixlegacy.HostMetadataV4V6Remove, out *felix.ToDataplane) {
	delete(h.hosts, rm.GetHostname())
	removal(out, rm.GetHostname())
}
