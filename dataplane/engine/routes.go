package engine

import (
	"net/netip"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// routeKey is a route's destination, masked, as RouteRemove names it.
type routeKey = netip.Prefix

func newRouteManager() *objectManager[routeKey, model.Route] {
	return newObjectManager("route",
		func(a, b *model.Route) bool { return *a == *b },
		func(k routeKey) string { return k.String() })
}

// Routes are keyed by the masked destination, so an update and the remove
// that names the same prefix meet whichever host bits each carried.
func (e *Engine) onRouteUpdate(u *model.RouteUpdate) {
	r := u.Route
	e.routes.set(r.Dst.Masked(), &r)
}

func (e *Engine) onRouteRemove(r *model.RouteRemove) {
	e.routes.del(r.Dst.Masked())
}
