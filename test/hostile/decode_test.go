package hostile_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

// rawBytes is a message the client sends as it is, unencoded.
type rawBytes []byte

// bytesCodec is the proto codec, except that rawBytes go on the wire
// as they are: a client that can send what no protobuf library would.
type bytesCodec struct{ encoding.CodecV2 }

func (c bytesCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(rawBytes); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.CodecV2.Marshal(v)
}

// rawCodec lets a connection send rawBytes as well as messages.
func rawCodec() grpc.DialOption {
	return grpc.WithDefaultCallOptions(grpc.ForceCodecV2(bytesCodec{encoding.GetCodecV2(protocodec.Name)}))
}

// rawSync opens a Sync stream whose messages may be rawBytes.
func rawSync(t *testing.T, d *daemon) grpc.ClientStream {
	t.Helper()
	conn := dial(t, d, rawCodec())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := conn.NewStream(ctx, &dpdv1.Dataplane_ServiceDesc.Streams[0], dpdv1.Dataplane_Sync_FullMethodName)
	must(t, err)
	return st
}

// Malformed bytes: an envelope whose payload (field 15, 5 bytes) is cut
// short names nothing, so the session must resync; a WorkloadEndpointUpdate
// (field 11) whose tier list is cut short still names its endpoint, which
// goes to error while the stream goes on.
var (
	envelopeCut = rawBytes{0x7a, 0x05, 0x01}
	decodeLogs  = 40
)

func cutEndpoint(workload string) rawBytes {
	str := func(b []byte, n protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, n, protowire.BytesType), s)
	}
	sub := func(b []byte, n protowire.Number, m []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, n, protowire.BytesType), m)
	}
	id := str(str(str(nil, 2, "k8s"), 3, workload), 4, "eth0")
	ep := sub(str(nil, 2, "calibad"), 7, []byte{0x12, 0x7f}) // tier: a name 127 bytes long, cut
	msg := protowire.AppendVarint(protowire.AppendTag(nil, 15, protowire.VarintType), 7)
	return sub(msg, 11, sub(sub(nil, 1, id), 5, ep))
}

// cutHostEndpoint is a HostEndpointUpdate (field 9) whose id reads but
// whose tier list is cut short.
func cutHostEndpoint(id string) rawBytes {
	b := protowire.AppendTag(nil, 2, protowire.BytesType)
	b = protowire.AppendString(b, id)
	ep := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "eth9")
	ep = append(protowire.AppendTag(ep, 3, protowire.BytesType), 0x02, 0x12, 0x7f) // tiers: one cut short
	body := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), b)
	body = protowire.AppendBytes(protowire.AppendTag(body, 3, protowire.BytesType), ep)
	msg := protowire.AppendVarint(protowire.AppendTag(nil, 15, protowire.VarintType), 8)
	return protowire.AppendBytes(protowire.AppendTag(msg, 9, protowire.BytesType), body)
}

// hostEndpointState is Inspect's status and reason of one host endpoint.
func hostEndpointState(t *testing.T, d *daemon, id string) epState {
	t.Helper()
	conn := dial(t, d)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := dpdv1.NewInspectClient(conn).ListHostEndpoints(ctx, &dpdv1.ListHostEndpointsRequest{})
	if err != nil {
		t.Fatalf("ListHostEndpoints: %v", err)
	}
	for _, h := range resp.GetHostEndpoints() {
		if h.GetId() == id {
			return epState{h.GetStatus(), h.GetReason()}
		}
	}
	return epState{}
}

// TestMalformedProtobufOnSync: bytes that are not a ToDataplane end the
// Sync stream with InvalidArgument naming the message that failed; the
// error is logged once with the session and the message number and
// counted in dpd_felix_decode_errors_total; a malformed endpoint update
// puts only that endpoint in error. dpd keeps serving and the endpoint
// applied before stays up.
func TestMalformedProtobufOnSync(t *testing.T) {
	d := startDaemon(t, nil)
	st := rawSync(t, d)
	for _, m := range []*felix.ToDataplane{wepUpdate("web", "caliweb", 0), inSync()} {
		must(t, st.SendMsg(m))
	}
	testutil.WaitFor(t, 30*time.Second, "web up", func() bool { return listEndpoints(t, d)["ns/web"].status == "up" })

	// Message 3 names its endpoint: that endpoint goes to error with the
	// reason, the stream stays up.
	must(t, st.SendMsg(cutEndpoint("ns/bad")))
	testutil.WaitFor(t, 30*time.Second, "the malformed endpoint in error", func() bool { return listEndpoints(t, d)["ns/bad"].status == "error" })
	if r := listEndpoints(t, d)["ns/bad"].reason; !strings.Contains(r, "undecodable") || !strings.Contains(r, "#3") {
		t.Errorf("bad endpoint's reason %q, want it to say message #3 was undecodable", r)
	}
	if n := d.metric("dpd_felix_decode_errors_total", `transport="grpc"`, `outcome="endpoint"`); n != 1 {
		t.Errorf("dpd_felix_decode_errors_total{outcome=endpoint} = %v, want 1", n)
	}
	// Message 4 names its host endpoint: likewise, it goes to error (and
	// enforces no policy: deny, failsafes excepted), the stream stays up.
	must(t, st.SendMsg(cutHostEndpoint("bad-hep")))
	testutil.WaitFor(t, 30*time.Second, "the malformed host endpoint in error", func() bool {
		return hostEndpointState(t, d, "bad-hep").status == "error"
	})
	if r := hostEndpointState(t, d, "bad-hep").reason; !strings.Contains(r, "undecodable") || !strings.Contains(r, "#4") || !strings.Contains(r, "failing closed") {
		t.Errorf("bad host endpoint's reason %q, want it to say message #4 was undecodable and it fails closed", r)
	}

	// Message 5 names nothing: the stream ends InvalidArgument.
	must(t, st.SendMsg(envelopeCut))
	err := st.RecvMsg(&felix.FromDataplane{})
	for err == nil {
		err = st.RecvMsg(&felix.FromDataplane{})
	}
	t.Logf("stream ended: %v", err)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "felix message #5") || !strings.Contains(err.Error(), "undecodable") {
		t.Errorf("stream ended with %v, want InvalidArgument naming undecodable felix message #5", err)
	}
	testutil.WaitFor(t, 10*time.Second, "the resync counted", func() bool {
		return d.metric("dpd_felix_decode_errors_total", `transport="grpc"`, `outcome="resync"`) == 1
	})
	logged := regexp.MustCompile(`level=ERROR msg="undecodable controller message.*session=1 .*message=5`)
	if n := len(logged.FindAllString(d.log.text(), -1)); n != 1 {
		t.Errorf("%d log lines of the undecodable message with session=1 and message=5, want 1:\n%s", n, d.log.text())
	}

	d.answers(t)
	checkUp(t, d, "web")
	// A new session resyncs and clears the error.
	c := newLiveController(t, d)
	c.send(t, wepUpdate("web", "caliweb", 0), inSync())
	c.waitUp(t, "web")
	testutil.WaitFor(t, 30*time.Second, "only web after the resync", func() bool { return len(listEndpoints(t, d)) == 1 })
	d.checkMemory(t, rssBound)
	d.checkLogLines(t, decodeLogs)
}
