package nl

import "sync/atomic"

// Stats counts the Configurer's kernel operations, so callers and tests can
// assert how much a sync did: re-applying an unchanged endpoint makes no
// writes at all, only reads.
type Stats struct {
	RoutesAdded       uint64 // RouteReplace of a destination the interface lacked, or by ConfigureNewEndpoint
	RoutesReplaced    uint64 // RouteReplace of a route that differed
	RoutesDeleted     uint64
	NeighboursSet     uint64
	NeighboursDeleted uint64
	SysctlWrites      uint64

	RouteDumps     uint64 // route listings (reads)
	NeighbourDumps uint64 // neighbour listings (reads)
	SysctlReads    uint64
}

// RouteWrites is the number of route changes of any kind.
func (s Stats) RouteWrites() uint64 { return s.RoutesAdded + s.RoutesReplaced + s.RoutesDeleted }

// Writes is the number of kernel changes of any kind.
func (s Stats) Writes() uint64 {
	return s.RouteWrites() + s.NeighboursSet + s.NeighboursDeleted + s.SysctlWrites
}

// Sub returns s - o, field by field: the operations made between two
// snapshots.
func (s Stats) Sub(o Stats) Stats {
	return Stats{
		RoutesAdded:       s.RoutesAdded - o.RoutesAdded,
		RoutesReplaced:    s.RoutesReplaced - o.RoutesReplaced,
		RoutesDeleted:     s.RoutesDeleted - o.RoutesDeleted,
		NeighboursSet:     s.NeighboursSet - o.NeighboursSet,
		NeighboursDeleted: s.NeighboursDeleted - o.NeighboursDeleted,
		SysctlWrites:      s.SysctlWrites - o.SysctlWrites,
		RouteDumps:        s.RouteDumps - o.RouteDumps,
		NeighbourDumps:    s.NeighbourDumps - o.NeighbourDumps,
		SysctlReads:       s.SysctlReads - o.SysctlReads,
	}
}

// counters is the live, concurrency-safe form of Stats.
type counters struct {
	routesAdded, routesReplaced, routesDeleted atomic.Uint64
	neighSet, neighDeleted                     atomic.Uint64
	sysctlWrites, sysctlReads                  atomic.Uint64
	routeDumps, neighDumps                     atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		RoutesAdded:       c.routesAdded.Load(),
		RoutesReplaced:    c.routesReplaced.Load(),
		RoutesDeleted:     c.routesDeleted.Load(),
		NeighboursSet:     c.neighSet.Load(),
		NeighboursDeleted: c.neighDeleted.Load(),
		SysctlWrites:      c.sysctlWrites.Load(),
		RouteDumps:        c.routeDumps.Load(),
		NeighbourDumps:    c.neighDumps.Load(),
		SysctlReads:       c.sysctlReads.Load(),
	}
}
