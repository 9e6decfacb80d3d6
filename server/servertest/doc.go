// Package servertest runs a real dpd daemon (engine, kernel, gRPC and
// metrics) on a short temporary Unix socket, for the tests of server,
// client and dpdctl: over the memory kernel, or any kernel a privileged
// test brings. It is test support only.
package servertest
