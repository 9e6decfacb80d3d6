package linux

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
)

// Service NAT: every (service, protocol, port) is a "service port" with an
// id; its frontends (cluster IPs, load balancer IP, external IPs, load
// balancer ingress IPs, all on that port) point at the id in dpd_nat_fe,
// and its ready backends sit at ordinals 0..n-1 of the id in dpd_nat_be.
// The programs pick a backend per connection and keep it (bpf/dpd_nat.h).
//
// Backends are matched to a port by protocol. model.ServicePort carries no
// port name (Felix's ServiceUpdate has none), so when a service has several
// ports of one protocol a backend belongs to the port equal to its own port
// (targetPort == port, the common case); other backends of such a service
// are ambiguous and skipped. SCTP is not translated (its CRC32c would have
// to be recomputed), and neither are NodePorts (they arrive on host
// interfaces, where dpd attaches nothing yet).
//
// When a backend leaves, the connections pinned to it are flushed at the
// end of the apply pass (one conntrack walk for all services), so their
// next packet picks a current backend; ids of removed ports are reused only
// after that flush.

type svcPortKey struct {
	proto uint8
	port  uint16
	v6    bool // each family is its own service port: a frontend only reaches backends of its family
}

// natPort is one programmed service port.
type natPort struct {
	id  uint32
	fes []tcbpf.NATFrontend
	bes []tcbpf.NATBackend
}

// serviceProgrammer programs services into the NAT maps; its fields are
// the userspace side of those maps. Called under Kernel.mu.
type serviceProgrammer struct {
	maps natMaps
	log  *slog.Logger

	services map[model.ServiceKey]map[svcPortKey]*natPort
	owners   map[tcbpf.NATFrontend]*natPort // the port each programmed frontend points at
	inUse    map[uint32]bool                // ids programmed, adopted or awaiting the flush
	next     uint32
	// adopted are frontends found in the maps at start: a service that
	// claims one keeps its id, so live connections keep their backends.
	adopted map[tcbpf.NATFrontend]tcbpf.NATFrontendEntry
	claimed map[uint32]bool // adopted ids a service took over
	flush   tcbpf.NATFlowFilter
	release []uint32 // ids freed once flush has run
}

func newServiceProgrammer(maps natMaps, log *slog.Logger) *serviceProgrammer {
	return &serviceProgrammer{
		maps:     maps,
		log:      log,
		services: map[model.ServiceKey]map[svcPortKey]*natPort{},
		owners:   map[tcbpf.NATFrontend]*natPort{},
		inUse:    map[uint32]bool{},
		next:     1,
		adopted:  map[tcbpf.NATFrontend]tcbpf.NATFrontendEntry{},
		claimed:  map[uint32]bool{},
		flush:    tcbpf.NATFlowFilter{Services: map[uint32]bool{}, Backends: map[tcbpf.NATFlowBackend]bool{}},
	}
}

// adopt records the frontends a previous dpd programmed.
func (t *serviceProgrammer) adopt() error {
	fes, err := t.maps.NATFrontends()
	if err != nil {
		return err
	}
	for _, e := range fes {
		t.adopted[e.Frontend] = e
		t.inUse[e.ID] = true
	}
	return nil
}

func (t *serviceProgrammer) allocID() uint32 {
	for t.inUse[t.next] || t.next == 0 {
		t.next++
	}
	id := t.next
	t.next++
	t.inUse[id] = true
	return id
}

// apply programs s (engine.ServiceKernel's ApplyService).
func (t *serviceProgrammer) apply(s *model.Service) error {
	want := desiredPorts(s)
	have := t.services[s.Key]
	if have == nil {
		have = map[svcPortKey]*natPort{}
		t.services[s.Key] = have
	}
	var errs []error
	for pk, d := range want {
		np := have[pk]
		if np == nil {
			np = t.newPort(d.fes)
			have[pk] = np
		}
		if err := t.programPort(np, d.fes, d.bes); err != nil {
			errs = append(errs, fmt.Errorf("service %s/%s port %d/%d: %w", s.Key.Namespace, s.Key.Name, pk.proto, pk.port, err))
		}
	}
	for pk, np := range have {
		if _, ok := want[pk]; ok {
			continue
		}
		if err := t.deletePort(np); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(have, pk)
	}
	return errors.Join(errs...)
}

// remove removes what apply programmed for s.
func (t *serviceProgrammer) remove(s *model.Service) error {
	have := t.services[s.Key]
	var errs []error
	for pk, np := range have {
		if err := t.deletePort(np); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(have, pk)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	delete(t.services, s.Key)
	return nil
}

// newPort takes the id a previous dpd gave one of fes, else a new one.
func (t *serviceProgrammer) newPort(fes []tcbpf.NATFrontend) *natPort {
	np := &natPort{}
	for _, f := range fes {
		if e, ok := t.adopted[f]; ok && !t.claimed[e.ID] {
			t.claimed[e.ID] = true
			np.id = e.ID
			// What the maps hold, so programming rewrites and trims it and
			// flushes the connections of backends that are gone.
			bes, err := t.maps.NATBackendsOf(e.ID)
			if err != nil {
				t.log.Warn("read adopted service backends", "id", e.ID, "err", err)
			}
			for len(bes) < e.Count {
				bes = append(bes, tcbpf.NATBackend{})
			}
			np.bes = bes
			return np
		}
	}
	np.id = t.allocID()
	return np
}

// programPort makes np's maps entries fes -> bes, scheduling the
// flush of connections pinned to backends that left.
func (t *serviceProgrammer) programPort(np *natPort, fes []tcbpf.NATFrontend, bes []tcbpf.NATBackend) error {
	for _, f := range fes {
		if o := t.owners[f]; o != nil && o != np {
			t.log.Warn("service frontend claimed by two services; the last one wins", "frontend", f)
			o.fes = slices.DeleteFunc(o.fes, func(x tcbpf.NATFrontend) bool { return x == f })
		}
		delete(t.adopted, f)
	}
	if err := t.maps.ProgramNATPort(np.id, fes, bes, len(np.bes)); err != nil {
		return err
	}
	for _, f := range np.fes {
		if !slices.Contains(fes, f) && t.owners[f] == np {
			if err := t.maps.DeleteNATFrontend(f); err != nil {
				return err
			}
			delete(t.owners, f)
		}
	}
	for _, b := range np.bes {
		if b.Addr.IsValid() && !slices.Contains(bes, b) {
			t.flush.Backends[tcbpf.NATFlowBackend{ID: np.id, Backend: b}] = true
		}
	}
	for _, f := range fes {
		t.owners[f] = np
	}
	np.fes, np.bes = fes, bes
	return nil
}

// deletePort removes np's frontends and backends; its connections
// are flushed and its id freed at the end of the pass.
func (t *serviceProgrammer) deletePort(np *natPort) error {
	for _, f := range np.fes {
		if t.owners[f] != np {
			continue
		}
		if err := t.maps.DeleteNATFrontend(f); err != nil {
			return err
		}
		delete(t.owners, f)
	}
	np.fes = nil
	if err := t.maps.DeleteNATPort(np.id, len(np.bes)); err != nil {
		return err
	}
	np.bes = nil
	t.flush.Services[np.id] = true
	t.release = append(t.release, np.id)
	return nil
}

// flushFlows runs the pending flush (EndApply) and frees the ids of
// removed ports.
func (t *serviceProgrammer) flushFlows() error {
	if t.flush.Empty() {
		return nil
	}
	n, err := t.maps.FlushNATFlows(t.flush)
	if err != nil {
		return fmt.Errorf("flush nat flows: %w", err)
	}
	if n > 0 {
		t.log.Debug("flushed connections of removed service backends", "count", n)
	}
	for _, id := range t.release {
		delete(t.inUse, id)
	}
	t.release = nil
	clear(t.flush.Services)
	clear(t.flush.Backends)
	return nil
}

// gc removes what a previous dpd programmed for services that
// were not re-sent: adopted frontends nobody claimed, backends of ids no
// port uses, and their connections.
func (t *serviceProgrammer) gc() error {
	var errs []error
	for f, e := range t.adopted {
		if err := t.maps.DeleteNATFrontend(f); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(t.adopted, f)
		if !t.claimed[e.ID] {
			t.flush.Services[e.ID] = true
			t.release = append(t.release, e.ID)
		}
	}
	keep := map[uint32]bool{}
	for _, ports := range t.services {
		for _, np := range ports {
			keep[np.id] = true
		}
	}
	if _, err := t.maps.DeleteNATBackendsExcept(keep); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// portWant is the desired frontends and backends of one service port.
type portWant struct {
	fes []tcbpf.NATFrontend
	bes []tcbpf.NATBackend
}

// desiredPorts derives each translated port's frontends and ready
// backends, sorted so equal input programs equal maps.
func desiredPorts(s *model.Service) map[svcPortKey]portWant {
	var addrs []netip.Addr
	addrs = append(addrs, s.ClusterIPs...)
	addrs = append(addrs, s.LoadBalancerIP)
	addrs = append(addrs, s.ExternalIPs...)
	addrs = append(addrs, s.LoadBalancerIngressIP...)
	perProto := map[uint8]int{}
	for _, sp := range s.Ports {
		perProto[sp.Protocol]++
	}
	out := map[svcPortKey]portWant{}
	for _, sp := range s.Ports {
		if sp.Protocol != model.ProtoTCP && sp.Protocol != model.ProtoUDP {
			continue
		}
		for _, v6 := range []bool{false, true} {
			pk := svcPortKey{proto: sp.Protocol, port: sp.Port, v6: v6}
			if w := desiredPort(s, sp, addrs, v6, perProto[sp.Protocol] > 1); len(w.fes) > 0 {
				out[pk] = w
			}
		}
	}
	return out
}

// desiredPort is one service port's frontends and ready backends of one
// family (IPv4-mapped addresses are IPv4). shared: other ports of the
// service have the same protocol.
func desiredPort(s *model.Service, sp model.ServicePort, addrs []netip.Addr, v6, shared bool) portWant {
	family := func(a netip.Addr) bool {
		a = a.Unmap()
		return a.IsValid() && a.Is6() == v6
	}
	var w portWant
	for _, a := range addrs {
		if family(a) {
			f := tcbpf.NATFrontend{Addr: a.Unmap(), Port: sp.Port, Proto: sp.Protocol}
			if !slices.Contains(w.fes, f) {
				w.fes = append(w.fes, f)
			}
		}
	}
	for _, b := range s.Backends {
		if !b.Ready || b.Protocol != sp.Protocol || !family(b.Addr) || b.Port == 0 {
			continue
		}
		if shared && b.Port != sp.Port {
			continue // ambiguous without port names
		}
		nb := tcbpf.NATBackend{Addr: b.Addr.Unmap(), Port: b.Port}
		if !slices.Contains(w.bes, nb) {
			w.bes = append(w.bes, nb)
		}
	}
	slices.SortFunc(w.fes, func(a, b tcbpf.NATFrontend) int { return a.Addr.Compare(b.Addr) })
	slices.SortFunc(w.bes, func(a, b tcbpf.NATBackend) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port))
	})
	return w
}
