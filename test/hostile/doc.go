// Package hostile replays hostile input against the real dpd binary
// (--dataplane=memory, no privileges needed): floods of credentials files,
// links under the policy-sync directory, huge files, zero-length pipe
// frames. Each test asserts that the daemon keeps answering on its socket
// and /metrics, that its CPU time, memory (from /proc) and log lines stay
// under stated bounds, and that nothing outside its directories changes.
// DPD_HOSTILE_BINARY runs the suite against another build (to measure one
// from before a fix).
package hostile
