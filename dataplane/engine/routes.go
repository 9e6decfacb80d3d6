package engine

import (
	"fmt"
	"net/netip"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

// routeKey is a route's destination, masked, as RouteRemove names it.
type routeKey = netip.Prefix

func newRouteManager() *objectManager[routeKey, model.Route] {
	return newObjectManager("route",
		func(a, b *model.Route) bool { return *a == *b },
		func(k routeKey) string { return k.String() })
}

func (e *Engine) onRouteUpdate(u *felix.RouteUpdate) error {
	r, err := felixconv.Route(u)
	if err != nil {
		return fmt.Errorf("route %s: %w", u.GetDst(), err)
	}
	e.routes.set(r.Dst.Masked(), &r)
	return nil
}

func (e *Engine) onRouteRemove(r *felix.RouteRemove) error {
	// Parse dst exactly as RouteUpdate's, so the keys match.
	parsed, err := felixconv.Route(&felix.RouteUpdate{Dst: r.GetDst()})
	if err != nil {
		return fmt.Errorf("route remove %q: %w", r.GetDst(), err)
	}
	e.routes.del(parsed.Dst.Masked())
	return nil
}
