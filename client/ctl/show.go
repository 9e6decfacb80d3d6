package ctl

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// parseOutput parses a command whose only flag is -o (text or json).
func parseOutput(name string, args []string) (string, error) {
	fs := subFlags(name)
	out := fs.String("o", "text", "output format: text or json")
	if err := parseSub(fs, args); err != nil {
		return "", err
	}
	if *out != "text" && *out != "json" {
		return "", fmt.Errorf("%w: -o must be text or json", errUsage)
	}
	return *out, nil
}

// inspectRPC dials and runs one Inspect RPC, given as a method expression
// such as dpdv1.InspectClient.ListPolicies, within the timeout; a failure
// is wrapped with what.
func inspectRPC[Req, Resp any](g *globals, what string,
	rpc func(dpdv1.InspectClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	var resp Resp
	c, err := g.dial(ctx)
	if err == nil {
		defer func() { _ = c.Close() }()
		resp, err = rpc(c.Inspect(), ctx, req)
	}
	if err != nil {
		return resp, fmt.Errorf("%s: %w", what, err)
	}
	return resp, nil
}

func runStatus(g *globals, args []string, w io.Writer) error {
	format, err := parseOutput("status", args)
	if err != nil {
		return err
	}
	st, err := inspectRPC(g, "get status", dpdv1.InspectClient.GetStatus, &dpdv1.GetStatusRequest{})
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(w, st)
	}
	s, n := st.GetSession(), st.GetCounts()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, f string, a ...any) { printf(tw, "%s:\t"+f+"\n", append([]any{k}, a...)...) }
	row("version", "%s", st.GetVersion())
	row("pid", "%d", st.GetPid())
	row("started", "%s", when(st.GetStarted()))
	row("dataplane", "%s", st.GetDataplane())
	if s.GetConnected() {
		row("controller", "connected: session %d from %s since %s", s.GetId(), s.GetPeer(), when(s.GetSince()))
	} else {
		row("controller", "not connected")
	}
	row("messages", "%d received, %d invalid", s.GetMessagesReceived(), s.GetInvalidMessages())
	row("controller in sync", "%t", st.GetControllerInSync())
	row("dataplane in sync", "%t", st.GetDataplaneInSync())
	row("endpoints", "%d (%d up, %d down, %d error, %d dirty)", n.GetEndpoints(),
		n.GetEndpointsUp(), n.GetEndpointsDown(), n.GetEndpointsError(), n.GetEndpointsDirty())
	row("objects", "%d policies, %d profiles, %d ip sets, %d routes, %d services, %d host endpoints",
		n.GetPolicies(), n.GetProfiles(), n.GetIpSets(), n.GetRoutes(), n.GetServices(), n.GetHostEndpoints())
	row("last apply", "%s", when(st.GetLastApply()))
	if e := st.GetLastApplyError(); e != "" {
		row("last apply error", "%s", e)
	}
	if a := st.GetAttach(); a != nil {
		row("attach mode", "%s (%s)", a.GetMode(), a.GetReason())
		for _, c := range a.GetCosts() {
			if s := kernelCost(c); s != "" {
				row("  "+c.GetOp(), "%s", s)
			}
		}
	}
	switch st.GetWorkloadForwarding() {
	case "redirect":
		how := "straight to the destination's interface, skipping the host's IP stack"
		if st.GetWorkloadRedirectPeer() {
			how += "; an established flow's into the workload's namespace, past the host side"
		}
		row("workload to workload", "redirect (%s)", how)
	case "stack":
		row("workload to workload", "stack (routed by the host)")
	}
	return tw.Flush()
}

func runEndpoints(g *globals, args []string, w io.Writer) error {
	format, err := parseOutput("endpoints", args)
	if err != nil {
		return err
	}
	resp, err := inspectRPC(g, "list endpoints", dpdv1.InspectClient.ListEndpoints, &dpdv1.ListEndpointsRequest{})
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(w, resp)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	printf(tw, "ENDPOINT\tINTERFACE\tSTATUS\tIPV4\tIPV6\tATTACH\tREASON\n")
	for _, ep := range resp.GetEndpoints() {
		printf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", endpointID(ep.GetId()), ep.GetInterface(), ep.GetStatus(),
			strings.Join(ep.GetIpv4Nets(), ","), dashIfEmpty(strings.Join(ep.GetIpv6Nets(), ",")),
			dashIfEmpty(ep.GetAttachMode()), ep.GetReason())
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return fmt.Errorf("marshal json: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// endpointID prints an endpoint as dpd names it: orchestrator/workload/endpoint.
func endpointID(id *felix.WorkloadEndpointID) string {
	return id.GetOrchestratorId() + "/" + id.GetWorkloadId() + "/" + id.GetEndpointId()
}

func when(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "never"
	}
	return ts.AsTime().Local().Format(time.RFC3339)
}

// kernelCost prints a kernel operation's probed and observed costs.
func kernelCost(c *dpdv1.KernelCost) string {
	var parts []string
	if p := c.GetProbeSeconds(); p > 0 {
		parts = append(parts, "probe "+seconds(p))
	}
	if n := c.GetObservedCount(); n > 0 {
		parts = append(parts, fmt.Sprintf("observed %s (%d)", seconds(c.GetObservedMeanSeconds()), n))
	}
	return strings.Join(parts, ", ")
}

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond).String()
}
