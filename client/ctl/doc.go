// Package ctl is dpdctl's logic: status, endpoints and apply (a scenario
// file sent as one controller session), behind Main so cmd/dpdctl stays a
// one-line main and the commands are testable in-process.
package ctl
