package server

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// rawFrame receives one message's bytes undecoded. Dataplane/Sync reads
// its stream into it so that the wire edge, not gRPC, decodes them: the
// older Felix encodings misread under the current message set, and a
// message gRPC fails to unmarshal ends the stream with codes.Internal
// before the handler can say which message failed or blame its endpoint.
//
// With use set, the codec hands use the bytes instead, valid only during
// the call (gRPC's pooled buffers, not copied when they are one piece):
// decoding there saves a copy of every message.
type rawFrame struct {
	b   []byte
	use func(b []byte)
}

// rawCodec is gRPC's proto codec, except that a *rawFrame takes the bytes
// as they are. Everything else (every other service, every reply) goes
// through the proto codec unchanged, so clients see no difference.
type rawCodec struct{ encoding.CodecV2 }

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*rawFrame); ok {
		if f.use == nil {
			f.b = data.Materialize() // a copy: data's buffers are reused
			return nil
		}
		if len(data) == 1 {
			f.use(data[0].ReadOnlyData())
		} else {
			f.use(data.Materialize())
		}
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// rawCodecOption installs rawCodec on a server.
func rawCodecOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(rawCodec{encoding.GetCodecV2(proto.Name)})
}
