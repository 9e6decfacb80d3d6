package ctl

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// dashIfEmpty keeps table columns aligned when a cell is empty.
func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func joined(ss []string) string { return dashIfEmpty(strings.Join(ss, ",")) }

func runPolicies(g *globals, args []string, w io.Writer) error {
	format, err := parseOutput("policies", args)
	if err != nil {
		return err
	}
	resp, err := inspectRPC(g, "list policies", dpdv1.InspectClient.ListPolicies, &dpdv1.ListPoliciesRequest{})
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(w, resp)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	printf(tw, "KIND\tNAME\tTIERS\tIN\tOUT\tENDPOINTS\tIPSETS\n")
	for _, p := range resp.GetPolicies() {
		printf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", p.GetKind(), p.GetName(), joined(p.GetTiers()),
			p.GetInboundRules(), p.GetOutboundRules(), p.GetEndpoints(), joined(p.GetIpSets()))
	}
	return tw.Flush()
}

func runIPSets(g *globals, args []string, w io.Writer) error {
	fs := subFlags("ipsets")
	out := fs.String("o", "text", "output format: text or json")
	id := fs.String("id", "", "only this set")
	members := fs.Uint("members", 0, "members to show per set (dpd's default: 10)")
	if err := parseSub(fs, args); err != nil {
		return err
	}
	if err := checkFormat(*out); err != nil {
		return err
	}
	resp, err := inspectRPC(g, "list ip sets", dpdv1.InspectClient.ListIPSets, &dpdv1.ListIPSetsRequest{Id: *id, MaxMembers: uint32(*members)})
	if err != nil {
		return err
	}
	if *out == "json" {
		return writeJSON(w, resp)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	printf(tw, "ID\tTYPE\tMEMBERS\tENDPOINTS\tFIRST MEMBERS\n")
	for _, s := range resp.GetIpSets() {
		sample := joined(s.GetMembers())
		if s.GetTruncated() {
			sample += ",…"
		}
		printf(tw, "%s\t%s\t%d\t%d\t%s\n", s.GetId(), s.GetType(), s.GetMemberCount(), s.GetEndpoints(), sample)
	}
	return tw.Flush()
}

func runServices(g *globals, args []string, w io.Writer) error {
	format, err := parseOutput("services", args)
	if err != nil {
		return err
	}
	resp, err := inspectRPC(g, "list services", dpdv1.InspectClient.ListServices, &dpdv1.ListServicesRequest{})
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(w, resp)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	printf(tw, "SERVICE\tTYPE\tCLUSTER-IPS\tPORTS\tBACKENDS\n")
	for _, s := range resp.GetServices() {
		var ports, backends []string
		for _, p := range s.GetPorts() {
			port := fmt.Sprintf("%d/%s", p.GetPort(), p.GetProtocol())
			if p.GetNodePort() != 0 {
				port += fmt.Sprintf(":%d", p.GetNodePort())
			}
			ports = append(ports, port)
		}
		for _, b := range s.GetBackends() {
			be := fmt.Sprintf("%s:%d", b.GetIp(), b.GetPort())
			if !b.GetReady() {
				be += "(not ready)"
			}
			backends = append(backends, be)
		}
		printf(tw, "%s/%s\t%s\t%s\t%s\t%s\n", s.GetNamespace(), s.GetName(), dashIfEmpty(s.GetType()),
			joined(s.GetClusterIps()), joined(ports), joined(backends))
	}
	return tw.Flush()
}

func runRoutes(g *globals, args []string, w io.Writer) error {
	format, err := parseOutput("routes", args)
	if err != nil {
		return err
	}
	resp, err := inspectRPC(g, "list routes", dpdv1.InspectClient.ListRoutes, &dpdv1.ListRoutesRequest{})
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(w, resp)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	printf(tw, "DST\tTYPES\tNODE\tNODE-IP\tPOOL\tTUNNEL\tNAT-OUTGOING\n")
	for _, r := range resp.GetRoutes() {
		printf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%t\n", r.GetDst(), joined(r.GetTypes()), dashIfEmpty(r.GetDstNodeName()),
			dashIfEmpty(r.GetDstNodeIp()), r.GetPoolType(), dashIfEmpty(r.GetTunnel()), r.GetNatOutgoing())
	}
	return tw.Flush()
}

func checkFormat(f string) error {
	if f != "text" && f != "json" {
		return fmt.Errorf("%w: -o must be text or json", errUsage)
	}
	return nil
}
