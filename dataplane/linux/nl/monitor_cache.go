package nl

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// applyUpdate folds one subscription message into the cache and returns the
// reports it causes. Run's goroutine only.
func (m *Monitor) applyUpdate(u netlink.LinkUpdate) []model.LinkUpdate {
	attrs := u.Attrs()
	name, index := attrs.Name, int(u.Index)
	m.mu.Lock()
	defer m.mu.Unlock()
	if u.Header.Type == unix.RTM_DELLINK {
		// Only forget the name if it still denotes this index: a stale
		// delete must not erase a newer link that reuses the name.
		if e, ok := m.linksLocked[name]; ok && e.index == index {
			delete(m.linksLocked, name)
		}
		if m.namesByIndex[index] == name {
			delete(m.namesByIndex, index)
		}
		return m.pendingLocked([]string{name})
	}
	return m.pendingLocked(m.putLocked(name, linkEntry{index: index, state: stateOf(attrs)}))
}

// putLocked records that link e.index is called name and is in e.state,
// dropping what the index or the name denoted before. It returns the names
// touched. Caller holds m.mu (write).
func (m *Monitor) putLocked(name string, e linkEntry) []string {
	touched := []string{name}
	if old, ok := m.namesByIndex[e.index]; ok && old != name {
		// Renamed: the old name is gone.
		if oe, ok := m.linksLocked[old]; ok && oe.index == e.index {
			delete(m.linksLocked, old)
		}
		touched = append(touched, old)
	}
	if oe, ok := m.linksLocked[name]; ok && oe.index != e.index && m.namesByIndex[oe.index] == name {
		// The name now denotes another link; the old one is gone.
		delete(m.namesByIndex, oe.index)
	}
	m.namesByIndex[e.index] = name
	m.linksLocked[name] = e
	return touched
}

// resync re-lists every link into the cache, counts the entries that
// differed (repairs) and queues the reports that causes. complete is false
// when the kernel kept flagging the dump interrupted: what it listed was
// applied, but nothing was dropped. Run's goroutine only.
func (m *Monitor) resync() (complete bool, err error) {
	links, complete, err := m.listLinks()
	if err != nil {
		return false, err
	}
	pending, repairs := m.applyListing(links, complete)
	if complete {
		m.resyncs.Add(1)
	} else {
		m.partials.Add(1)
	}
	m.repairs.Add(repairs)
	m.queue.push(pending)
	return complete, nil
}

// applyListing folds a listing of links into the cache and returns the
// reports it causes and the number of entries it had to fix. A complete
// listing replaces the cache. An incomplete one (an interrupted dump) may
// lack links that exist, so it only adds and updates: treating what it
// lacks as deleted would report live workload interfaces gone. Run's
// goroutine only.
func (m *Monitor) applyListing(links []netlink.Link, complete bool) (pending []model.LinkUpdate, repairs uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !complete {
		var touched []string
		for _, l := range links {
			a := l.Attrs()
			e := linkEntry{index: a.Index, state: stateOf(a)}
			if old, ok := m.linksLocked[a.Name]; ok && old == e && m.namesByIndex[e.index] == a.Name {
				continue
			}
			repairs++
			touched = append(touched, m.putLocked(a.Name, e)...)
		}
		return m.pendingLocked(touched), repairs
	}

	fresh := make(map[string]linkEntry, len(links))
	byIndex := make(map[int]string, len(links))
	for _, l := range links {
		a := l.Attrs()
		fresh[a.Name] = linkEntry{index: a.Index, state: stateOf(a)}
		byIndex[a.Index] = a.Name
	}
	touched := make([]string, 0, len(fresh))
	for name, e := range fresh {
		if old, ok := m.linksLocked[name]; !ok || old != e {
			repairs++
		}
		touched = append(touched, name)
	}
	for name := range m.linksLocked {
		if _, ok := fresh[name]; !ok {
			repairs++
			touched = append(touched, name)
		}
	}
	// Names reported earlier but missing from both maps (a corrupted or
	// raced cache) must still hear that they are gone.
	for name := range m.reported {
		if _, ok := fresh[name]; !ok {
			touched = append(touched, name)
		}
	}
	m.linksLocked, m.namesByIndex = fresh, byIndex
	return m.pendingLocked(touched), repairs
}

// listLinks lists every link, retrying dumps the kernel flags interrupted
// (links changed meanwhile). When every try was interrupted it returns the
// last listing with complete false.
func (m *Monitor) listLinks() (links []netlink.Link, complete bool, err error) {
	for range dumpRetries {
		links, err = m.handle.LinkList()
		if err == nil {
			return links, true, nil
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return nil, false, fmt.Errorf("list links: %w", err)
		}
	}
	return links, false, nil
}

// pendingAll computes reports for every cached or reported name, after a
// prefix change. Run's goroutine only.
func (m *Monitor) pendingAll() []model.LinkUpdate {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.linksLocked))
	for name := range m.linksLocked {
		names = append(names, name)
	}
	for name := range m.reported {
		if !matchesAny(m.prefixes, name) {
			// Out of scope now: forget it, so a later match reports afresh.
			delete(m.reported, name)
		}
	}
	return m.pendingLocked(names)
}

// pendingLocked returns a report for each matching name whose cached state
// or ifindex differs from what was last reported (a new ifindex alone means
// the interface was re-created: news to the consumer), and records it as
// reported. Caller holds m.mu (write) and runs on Run's goroutine.
func (m *Monitor) pendingLocked(names []string) []model.LinkUpdate {
	var out []model.LinkUpdate
	for _, name := range names {
		if !matchesAny(m.prefixes, name) {
			continue
		}
		cur, ok := m.linksLocked[name]
		if !ok {
			cur = linkEntry{state: model.LinkAbsent}
		}
		prev, ok := m.reported[name]
		if !ok {
			prev = linkEntry{state: model.LinkAbsent}
		}
		if cur == prev {
			continue
		}
		if cur.state == model.LinkAbsent {
			delete(m.reported, name)
		} else {
			m.reported[name] = cur
		}
		out = append(out, model.LinkUpdate{Name: name, State: cur.state})
	}
	return out
}
