package engine

import (
	"log/slog"

	"google.golang.org/protobuf/proto"
)

// Kinds of messages dpd stores and acknowledges but does not enforce yet.
const (
	kindIPAMPool       = "ipam_pool"
	kindNamespace      = "namespace"
	kindServiceAccount = "service_account"
	kindWireguard      = "wireguard_endpoint"
	kindWireguardV6    = "wireguard_endpoint_v6"
	kindGlobalBGP      = "global_bgp_config"
	kindEncapsulation  = "encapsulation"
)

// ackStore keeps the last message per kind and key, so nothing the
// controller sends is lost, and logs once per kind that it is not enforced.
type ackStore struct {
	items  map[string]map[string]*ackEntry
	logged map[string]bool
}

type ackEntry struct {
	msg   proto.Message
	stale bool
}

func (s *ackStore) init() {
	s.items = map[string]map[string]*ackEntry{}
	s.logged = map[string]bool{}
}

func (s *ackStore) put(kind, key string, msg proto.Message, log *slog.Logger) {
	if !s.logged[kind] {
		s.logged[kind] = true
		log.Info("message kind is stored but not yet enforced", "kind", kind)
	}
	m := s.items[kind]
	if m == nil {
		m = map[string]*ackEntry{}
		s.items[kind] = m
	}
	m[key] = &ackEntry{msg: msg}
}

func (s *ackStore) remove(kind, key string) { delete(s.items[kind], key) }

// count returns how many messages of kind are stored.
func (s *ackStore) count(kind string) int { return len(s.items[kind]) }

func (s *ackStore) markStale() {
	for _, m := range s.items {
		for _, a := range m {
			a.stale = true
		}
	}
}

func (s *ackStore) sweep() int {
	n := 0
	for _, m := range s.items {
		for k, a := range m {
			if a.stale {
				delete(m, k)
				n++
			}
		}
	}
	return n
}
