// Package server exposes dpd's engine over gRPC: the controller stream
// (dpd.v1.Dataplane/Sync), read-only introspection (dpd.v1.Inspect),
// Calico's felix.PolicySync, health and reflection, all behind one chain of
// interceptors (Prometheus metrics, slog logging, panic recovery). It also
// serves /metrics, /livez and /readyz over HTTP, and Daemon wires all of it
// with the engine into one run group for cmd/dpd.
package server
