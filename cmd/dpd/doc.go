// Command dpd is the node-local dataplane driver daemon: flags (each with a
// DPD_* environment equivalent), the choice of kernel, and signals. The
// daemon itself is server.Daemon.
package main
