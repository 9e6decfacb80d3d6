// Package model holds the parsed, validated form of what the dataplane must
// enforce. Updates (update.go) are the controller's messages as the server
// translated them, once, at the edge: the engine's only input. From them
// the engine builds endpoints with their resolved per-direction policy, IP
// set members, routes and services, which kernels (the in-memory fake, the
// Linux/BPF dataplane) consume. The package is pure data and has no
// dependency on protobuf or BPF.
package model
