package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/dpd-dev/dpd/client/flowfmt"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// runObserve prints flow events, one line a flow, as hubble observe does.
func runObserve(g *globals, args []string, w io.Writer) error {
	fs := subFlags("observe")
	out := fs.String("o", "text", "output format: text or json (one object a line)")
	req := &dpdv1.ObserveRequest{}
	fs.StringVar(&req.Endpoint, "endpoint", "", "only flows of this endpoint, either side")
	fs.StringVar(&req.Namespace, "namespace", "", "only flows with an endpoint of this namespace")
	fs.StringVar(&req.Verdict, "verdict", "", "allow or deny")
	fs.StringVar(&req.Policy, "policy", "", "only flows decided by this policy or profile")
	port := fs.Uint("port", 0, "only flows with this port, either side")
	fs.StringVar(&req.Protocol, "protocol", "", "tcp, udp, icmp or a protocol number")
	fs.StringVar(&req.Type, "type", "", "new (decisions) or end (ended flows with their byte counts); both by default")
	fs.Func("label", "only flows with an endpoint whose namespace has these labels: key=value, key!=value, key or !key (repeat for more)", func(v string) error {
		req.Labels = append(req.Labels, v)
		return nil
	})
	fs.BoolVar(&req.StagedDiffers, "staged-differs", false, "only flows whose staged-policy preview differs from the verdict (dpd --staged-preview)")
	since := fs.String("since", "", "only flows since a time (RFC 3339) or a duration ago (5m)")
	last := fs.Uint("last", 0, "at most this many flows from the history (the newest)")
	fs.BoolVar(&req.Follow, "follow", false, "keep printing flows as they happen")
	fs.BoolVar(&req.Follow, "f", false, "short for --follow")
	if err := parseSub(fs, args); err != nil {
		return err
	}
	if err := checkFormat(*out); err != nil {
		return err
	}
	if *port > 65535 {
		return fmt.Errorf("%w: --port must be at most 65535", errUsage)
	}
	req.Port, req.Last = uint32(*port), uint32(*last)
	if *since != "" {
		t, err := parseSince(*since, time.Now())
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		req.Since = timestamppb.New(t)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dialCtx, cancel := context.WithTimeout(ctx, g.timeout)
	c, err := g.dial(dialCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	defer func() { _ = c.Close() }()
	if !req.Follow {
		// The history is bounded: without follow the answer is too.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.timeout)
		defer cancel()
	}
	stream, err := c.Inspect().Observe(ctx, req)
	if err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil && req.Follow {
				return nil // interrupted
			}
			return fmt.Errorf("observe: %w", err)
		}
		if *out == "json" {
			b, err := protojson.Marshal(resp)
			if err != nil {
				return fmt.Errorf("marshal json: %w", err)
			}
			printf(w, "%s\n", b)
			continue
		}
		if n := resp.GetLost(); n > 0 {
			printf(w, "EVENTS LOST: %d (this client read too slowly)\n", n)
		}
		if f := resp.GetFlow(); f != nil {
			printf(w, "%s\n", flowfmt.FlowLine(f))
		}
	}
}

// parseSince reads an RFC 3339 time or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: want a duration (5m) or an RFC 3339 time", s)
	}
	return t, nil
}
