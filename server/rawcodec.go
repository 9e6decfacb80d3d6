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
type rawFrame struct{ b []byte }

// rawCodec is gRPC's proto codec, except that a *rawFrame takes the bytes
// as they are. Everything else (every other service, every reply) goes
// through the proto codec unchanged, so clients see no difference.
type rawCodec struct{ encoding.CodecV2 }

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*rawFrame); ok {
		f.b = data.Materialize() // a copy: data's buffers are reused
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// rawCodecOption installs rawCodec on a server.
func rawCodecOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(rawCodec{encoding.GetCodecV2(proto.Name)})
}
