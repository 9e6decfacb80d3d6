package ctl

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// runEndpoint shows one endpoint with its kernel state and rule counters.
// Usage: endpoint ID [-o json].
func runEndpoint(g *globals, args []string, w io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return fmt.Errorf("%w: endpoint ID is required (orchestrator/workload/endpoint, or a unique workload id)", errUsage)
	}
	id := args[0]
	format, err := parseOutput("endpoint", args[1:])
	if err != nil {
		return err
	}
	ep, err := inspectRPC(g, "get endpoint", dpdv1.InspectClient.GetEndpoint, &dpdv1.GetEndpointRequest{Id: id})
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(w, ep)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, f string, a ...any) { printf(tw, "%s:\t"+f+"\n", append([]any{k}, a...)...) }
	row("endpoint", "%s", endpointID(ep.GetId()))
	row("interface", "%s (ifindex %d)", ep.GetInterface(), ep.GetIfindex())
	row("status", "%s", ep.GetStatus())
	if ep.GetReason() != "" {
		row("reason", "%s", ep.GetReason())
	}
	row("ipv4", "%s", joined(ep.GetIpv4Nets()))
	row("ipv6", "%s", joined(ep.GetIpv6Nets()))
	row("tiers", "%s", joined(ep.GetTiers()))
	row("profiles", "%s", joined(ep.GetProfileIds()))
	row("attach mode", "%s", dashIfEmpty(ep.GetAttachMode()))
	row("programs", "ingress %s, egress %s", dashIfEmpty(ep.GetIngressProgram()), dashIfEmpty(ep.GetEgressProgram()))
	row("last programmed", "%s", when(ep.GetLastProgrammed()))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(ep.GetCounters()) > 0 {
		printf(w, "\n")
		return counterTable(w, ep.GetCounters(), false)
	}
	return nil
}

func runCounters(g *globals, args []string, w io.Writer) error {
	fs := subFlags("counters")
	out := fs.String("o", "text", "output format: text or json")
	endpoint := fs.String("endpoint", "", "only this endpoint's programs")
	nonzero := fs.Bool("nonzero", false, "leave out rules that counted nothing")
	if err := parseSub(fs, args); err != nil {
		return err
	}
	if err := checkFormat(*out); err != nil {
		return err
	}
	resp, err := inspectRPC(g, "get counters", dpdv1.InspectClient.GetCounters, &dpdv1.GetCountersRequest{Endpoint: *endpoint, Nonzero: *nonzero})
	if err != nil {
		return err
	}
	if *out == "json" {
		return writeJSON(w, resp)
	}
	return counterTable(w, resp.GetCounters(), true)
}

func counterTable(w io.Writer, cs []*dpdv1.RuleCounter, endpoints bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	hdr := "DIR\tTIER\tPOLICY\tRULE\tRULE-ID\tACTION\tPACKETS\tBYTES"
	if endpoints {
		hdr += "\tENDPOINTS"
	}
	printf(tw, "%s\n", hdr)
	for _, c := range cs {
		r := c.GetRule()
		printf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d", r.GetDirection(), dashIfEmpty(r.GetTier()), dashIfEmpty(r.GetPolicy()),
			ruleName(r), dashIfEmpty(r.GetRuleId()), r.GetAction(), c.GetPackets(), c.GetBytes())
		if endpoints {
			printf(tw, "\t%s", joined(c.GetEndpoints()))
		}
		printf(tw, "\n")
	}
	return tw.Flush()
}

// ruleName is the rule's index in its policy, or what decided without one.
func ruleName(r *dpdv1.RuleRef) string {
	if r.GetSynthetic() != "" {
		return r.GetSynthetic()
	}
	return fmt.Sprint(r.GetIndex())
}

// runTrace asks dpd which rule decides a packet.
func runTrace(g *globals, args []string, w io.Writer) error {
	fs := subFlags("trace")
	out := fs.String("o", "text", "output format: text or json")
	req := &dpdv1.TraceRequest{}
	fs.StringVar(&req.Endpoint, "endpoint", "", "the endpoint (required): a workload id, or a host endpoint id (<id>/<interface> when it binds several)")
	fs.StringVar(&req.Direction, "dir", "", "ingress (to the workload) or egress (from it) (required)")
	fs.StringVar(&req.Protocol, "proto", "tcp", "tcp, udp, icmp, icmpv6 or a protocol number (icmp between IPv6 addresses is icmpv6)")
	fs.StringVar(&req.SrcIp, "src", "", "source IPv4 or IPv6 address (egress: defaults to the endpoint's IPv4 address)")
	fs.StringVar(&req.DstIp, "dst", "", "destination IPv4 or IPv6 address (ingress: defaults to the endpoint's IPv4 address)")
	sport := fs.Uint("sport", 0, "source port")
	dport := fs.Uint("dport", 0, "destination port")
	icmpType := fs.Int("icmp-type", -1, "ICMP type (default echo request: 8, IPv6 128)")
	icmpCode := fs.Uint("icmp-code", 0, "ICMP code")
	if err := parseSub(fs, args); err != nil {
		return err
	}
	if err := checkFormat(*out); err != nil {
		return err
	}
	if req.Endpoint == "" || req.Direction == "" {
		return fmt.Errorf("%w: --endpoint and --dir are required", errUsage)
	}
	req.SrcPort, req.DstPort = uint32(*sport), uint32(*dport)
	if *icmpType >= 0 {
		t := uint32(*icmpType)
		req.IcmpType = &t
	}
	req.IcmpCode = uint32(*icmpCode)
	resp, err := inspectRPC(g, "trace", dpdv1.InspectClient.Trace, req)
	if err != nil {
		return err
	}
	if *out == "json" {
		return writeJSON(w, resp)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, f string, a ...any) { printf(tw, "%s:\t"+f+"\n", append([]any{k}, a...)...) }
	row("verdict", "%s", strings.ToUpper(resp.GetVerdict()))
	row("decided by", "%s", resp.GetDecidedBy())
	if r := resp.GetRule(); r != nil {
		if r.GetTier() != "" {
			row("tier", "%s", r.GetTier())
		}
		if r.GetPolicy() != "" {
			row(dashIfEmpty(r.GetKind()), "%s", r.GetPolicy())
		}
		row("rule", "%s (id %s, action %s, counter %x)", ruleName(r), dashIfEmpty(r.GetRuleId()), r.GetAction(), r.GetCounterId())
	}
	if pv := resp.GetPolicyVerdict(); pv != "" && pv != resp.GetVerdict() {
		row("as a new flow", "%s", pv)
	}
	row("interface", "%s (ifindex %d)", resp.GetInterface(), resp.GetIfindex())
	row("why", "%s", resp.GetExplanation())
	return tw.Flush()
}
