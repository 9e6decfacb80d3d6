package testutil

import (
	"testing"

	"github.com/dpd-dev/dpd/proto/felix"
)

// TestToDataplaneEveryCase wraps a message of every payload case's type
// and checks it lands in that case (and that no two cases share a type).
func TestToDataplaneEveryCase(t *testing.T) {
	fields := (&felix.ToDataplane{}).ProtoReflect().Descriptor().Oneofs().ByName("payload").Fields()
	if fields.Len() == 0 {
		t.Fatal("ToDataplane has no payload cases")
	}
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		t.Run(string(f.Name()), func(t *testing.T) {
			payload := (&felix.ToDataplane{}).ProtoReflect().NewField(f).Message().Interface()
			m := ToDataplane(payload)
			got := m.ProtoReflect().WhichOneof(f.ContainingOneof())
			if got == nil || got.Name() != f.Name() {
				t.Fatalf("payload %s landed in %v, want %s", f.Message().FullName(), got, f.Name())
			}
			if m.ProtoReflect().Get(f).Message().Interface() != payload {
				t.Fatal("the wrapped message is not the one given")
			}
		})
	}
}
