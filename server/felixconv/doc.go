// Package felixconv is the one place where Felix protocol messages are
// checked and turned into dataplane/model values. The server calls Validate
// on every ToDataplane before the engine sees it; the engine calls the
// parse functions (Rule, Route, Service, IPSetMembers, ...) on the same
// message. Validate is built from those parse functions, so a message the
// server accepted always parses in the engine, and both report the same
// reason when it does not.
//
// Nothing here panics on any input: every sub-message may be nil.
package felixconv
