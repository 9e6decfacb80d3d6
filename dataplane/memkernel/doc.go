// Package memkernel is an in-memory engine.Kernel. It records the desired
// state the engine programs (IP sets with members, endpoints, routes,
// services, config), counts and logs every call, can inject failures per
// method, and lets tests declare interfaces absent or down. dpd uses it for
// --dataplane=memory (a dry run in which every interface is present and up)
// and the engine's unit tests use it as the kernel fake.
package memkernel
