// Package felixpipe frames protobuf messages the way Felix talks to an
// external dataplane driver over its pipes (fd 3 to the driver, fd 4 back):
// each message is an 8-byte little-endian length followed by that many
// bytes of protobuf.
package felixpipe
