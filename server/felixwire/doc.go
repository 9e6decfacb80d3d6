// Package felixwire decodes ToDataplane messages of every Felix generation
// dpd accepts into the current felix form, at the wire edge, once: Calico
// v3.28 to v3.31 name policies by tier and v1 name, list them in TierInfo
// as strings, send host metadata as separate per-family messages and (up
// to v3.29) one route type per route; v3.32 and later use the current
// felix package. The generation is recognised per message from the bytes
// themselves, because the older encodings often decode without error but
// wrongly under the newer message set; where the bytes cannot tell (host
// metadata), what the session has sent before decides.
//
// Everything downstream (translation, engine, policy sync) sees only the
// current form. A message that does not decode is an *Error that says
// whether a workload endpoint could still be identified (the caller puts
// that endpoint in error) or not (the caller must resync the session).
package felixwire
