// Package servertest runs a real dpd daemon (engine, memory kernel, gRPC
// and metrics) on a short temporary Unix socket, for the tests of server,
// client and dpdctl. It is test support only.
package servertest
