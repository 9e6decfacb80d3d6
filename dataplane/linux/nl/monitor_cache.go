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
	touched := []string{name}
	if u.Header.Type == unix.RTM_DELLINK {
		// Only forget the name if it still denotes this index: a stale
		// delete must not erase a newer link that reuses the name.
		if e, ok := m.linksLocked[name]; ok && e.index == index {
			delete(m.linksLocked, name)
		}
		if m.namesByIndex[index] == name {
			delete(m.namesByIndex, index)
		}
		return m.pendingLocked(touched)
	}
	if old, ok := m.namesByIndex[index]; ok && old != name {
		// Renamed: the old name is gone.
		if e, ok := m.linksLocked[old]; ok && e.index == index {
			delete(m.linksLocked, old)
		}
		touched = append(touched, old)
	}
	m.namesByIndex[index] = name
	m.linksLocked[name] = linkEntry{index: index, state: stateOf(attrs)}
	return m.pendingLocked(touched)
}

// resync replaces the cache with a full listing, counts the entries that
// differed (repairs), and reports what changed. Run's goroutine only.
func (m *Monitor) resync(report func(model.LinkUpdate)) error {
	links, err := m.listLinks()
	if err != nil {
		return err
	}
	fresh := make(map[string]linkEntry, len(links))
	byIndex := make(map[int]string, len(links))
	for _, l := range links {
		a := l.Attrs()
		fresh[a.Name] = linkEntry{index: a.Index, state: stateOf(a)}
		byIndex[a.Index] = a.Name
	}

	m.mu.Lock()
	var repairs uint64
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
	pending := m.pendingLocked(touched)
	m.mu.Unlock()

	m.resyncs.Add(1)
	m.repairs.Add(repairs)
	m.deliver(report, pending)
	return nil
}

// listLinks lists every link, retrying dumps the kernel flags interrupted:
// an incomplete list would report live links as deleted.
func (m *Monitor) listLinks() ([]netlink.Link, error) {
	var err error
	for range dumpRetries {
		var links []netlink.Link
		links, err = m.handle.LinkList()
		if err == nil {
			return links, nil
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return nil, fmt.Errorf("list links: %w", err)
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
// differs from what was last reported, and records it as reported. Caller
// holds m.mu (write) and runs on Run's goroutine.
func (m *Monitor) pendingLocked(names []string) []model.LinkUpdate {
	var out []model.LinkUpdate
	for _, name := range names {
		if !matchesAny(m.prefixes, name) {
			continue
		}
		cur := model.LinkAbsent
		if e, ok := m.linksLocked[name]; ok {
			cur = e.state
		}
		prev, ok := m.reported[name]
		if !ok {
			prev = model.LinkAbsent
		}
		if cur == prev {
			continue
		}
		if cur == model.LinkAbsent {
			delete(m.reported, name)
		} else {
			m.reported[name] = cur
		}
		out = append(out, model.LinkUpdate{Name: name, State: cur})
	}
	return out
}
