package memkernel

import "github.com/dpd-dev/dpd/dataplane/model"

// FailNext makes the next call of method return err. Several FailNext calls
// queue up; a queued failure takes precedence over Fail.
func (k *Kernel) FailNext(method string, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.failNext[method] = append(k.failNext[method], err)
}

// Fail makes every call of method return err until Fail(method, nil).
func (k *Kernel) Fail(method string, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err == nil {
		delete(k.failAlways, method)
		return
	}
	k.failAlways[method] = err
}

// ClearFailures drops every injected failure.
func (k *Kernel) ClearFailures() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.failNext = map[string][]error{}
	k.failAlways = map[string]error{}
}

// SetLink declares the state of interface name and reports it to every
// WatchLinks caller (outside the lock, so a reporter may call back in).
func (k *Kernel) SetLink(name string, st model.LinkState) {
	k.mu.Lock()
	k.links[name] = st
	watchers := make([]func(model.LinkUpdate), 0, len(k.watchers))
	for _, w := range k.watchers {
		watchers = append(watchers, w)
	}
	k.mu.Unlock()
	for _, w := range watchers {
		w(model.LinkUpdate{Name: name, State: st})
	}
}

// SetDefaultLink sets the state of every interface not named by SetLink
// (LinkUp after New). It reports nothing: no single interface changed.
func (k *Kernel) SetDefaultLink(st model.LinkState) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.linkDefault = st
}

// Watchers reports how many WatchLinks calls are active, so a test can wait
// until the engine listens before it calls SetLink.
func (k *Kernel) Watchers() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.watchers)
}
