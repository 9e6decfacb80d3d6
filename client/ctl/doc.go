// Package ctl is dpdctl's logic: the Inspect commands (status, endpoints,
// policies, IP sets, services, routes, counters, trace) as tables for
// humans or JSON for scripts, and apply (a scenario file sent as one
// controller session), behind Main so cmd/dpdctl stays a one-line main and
// the commands are testable in-process.
package ctl
