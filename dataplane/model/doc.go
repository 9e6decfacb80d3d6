// Package model holds the parsed, validated form of what the dataplane must
// enforce: endpoints with their resolved per-direction policy, IP set
// members, routes and services. The engine produces these values from Felix
// messages; kernels (the in-memory fake, the Linux/BPF dataplane) consume
// them. The package is pure data and has no dependency on protobuf or BPF.
package model
