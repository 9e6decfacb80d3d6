// Command nethelper is the e2e suite's traffic tool, run inside workload
// namespaces with `ip netns exec`: a TCP greeter and UDP echo server, and
// the matching one-shot probes. It is a separate small binary (built by the
// suite's TestMain without -race) so that a probe starts in milliseconds and
// does not depend on which netcat the host has.
package main
