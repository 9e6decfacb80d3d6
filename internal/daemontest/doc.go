// Package daemontest runs the real dpd binary as a child process for the
// harnesses that judge it from outside: the end-to-end tests (test/e2e)
// and the scenario benchmark driver (internal/bench). It starts dpd with
// the flags a harness needs (private socket, pin directory, metrics
// address), waits with a deadline until it serves the standard gRPC health
// service on its socket, keeps its output in a log file, stops it with
// SIGTERM (SIGKILL after a deadline, reported as a failure) and kills it
// on cleanup. It also builds the binary from the module.
//
// server/servertest is the other way to run a daemon: in-process, over
// the memory kernel, for the server's and the client's own tests.
package daemontest
