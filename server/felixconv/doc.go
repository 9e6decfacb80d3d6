// Package felixconv is the one translation of Felix protocol messages into
// dataplane/model values. The server calls Translate on every ToDataplane
// it receives: each field is parsed exactly once, the engine gets the
// model.Update, and a message that cannot be applied is refused here with
// an *Error that says why (and names the workload endpoint concerned, so
// its status can report it). The engine knows nothing of the wire.
//
// Nothing here panics on any input: every sub-message may be nil.
package felixconv
