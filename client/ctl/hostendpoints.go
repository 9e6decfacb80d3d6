package ctl

import (
	"io"
	"strings"
	"text/tabwriter"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// runHostEndpoints lists host endpoints, one line per interface they bind
// (one line with "-" when they bind none).
func runHostEndpoints(g *globals, args []string, w io.Writer) error {
	format, err := parseOutput("hostendpoints", args)
	if err != nil {
		return err
	}
	resp, err := inspectRPC(g, "list host endpoints", dpdv1.InspectClient.ListHostEndpoints, &dpdv1.ListHostEndpointsRequest{})
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(w, resp)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	printf(tw, "HOST ENDPOINT\tNAMES\tSTATUS\tINTERFACE\tIFINDEX\tATTACH\tINGRESS\tEGRESS\tREASON\n")
	for _, h := range resp.GetHostEndpoints() {
		names := h.GetName()
		if names == "" {
			names = strings.Join(h.GetExpectedIps(), ",")
		}
		ifaces := h.GetInterfaces()
		if len(ifaces) == 0 {
			ifaces = []*dpdv1.HostInterface{{Name: "-"}}
		}
		for _, hi := range ifaces {
			printf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", h.GetId(), names, h.GetStatus(), hi.GetName(),
				hi.GetIfindex(), dash(hi.GetAttachMode()), short(hi.GetIngressProgram()), short(hi.GetEgressProgram()), h.GetReason())
		}
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// short abbreviates a program content hash.
func short(s string) string {
	if s == "" {
		return "-"
	}
	if len(s) > 20 {
		return s[:20]
	}
	return s
}
