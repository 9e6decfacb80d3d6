// Command dpdctl talks to a running dpd: status, endpoints, and apply a
// scenario file as a controller session. The logic lives in client/ctl.
package main
