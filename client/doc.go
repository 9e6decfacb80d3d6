// Package client is the Go client of dpd: Dial connects over the Unix
// socket or mTLS TCP, and Session is a controller stream that sends a
// snapshot, then InSync, then live updates, and on failure reconnects with
// backoff and replays the caller's current desired state.
package client
