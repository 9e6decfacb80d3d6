// Package engine is dpd's engine: it takes model updates, which the server
// translated from the controller's messages, from a bounded inbox, records
// them in per-kind managers that only mark state dirty, and, once the
// controller is in sync, applies the dirty state through the narrow Kernel
// interface in dependency order. It reports endpoint status, the
// happy-endpoint set, DataplaneInSync and heartbeats on an outbox. The
// engine is pure logic: nothing here touches the OS.
package engine
