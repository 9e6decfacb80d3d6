package e2e

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"

	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixwire"
)

// Wire generations a test controller can speak.
const (
	WireCurrent = ""       // Calico v3.32+ / master
	WireLegacy  = "legacy" // Calico v3.28-v3.31
)

// legacyCodec sends ToDataplane as a Felix v3.30/v3.31 encodes it and
// everything else as gRPC's proto codec does, so one client drives dpd as
// an older Felix would.
type legacyCodec struct{ encoding.CodecV2 }

func (c legacyCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*felix.ToDataplane); ok {
		b, err := felixwire.MarshalLegacy(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.CodecV2.Marshal(v)
}

// wireDialOption makes a client speak generation wire.
func wireDialOption(wire string) []grpc.DialOption {
	if wire != WireLegacy {
		return nil
	}
	return []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.ForceCodecV2(legacyCodec{encoding.GetCodecV2(proto.Name)}))}
}
