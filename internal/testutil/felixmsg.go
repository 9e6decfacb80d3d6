package testutil

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/dpd-dev/dpd/proto/felix"
)

// ToDataplane wraps payload (a *felix.InSync, *felix.IPSetUpdate, ...) in
// the case of ToDataplane's payload oneof that carries its message type,
// so tests need not name the generated wrapper types. It panics when no
// case, or more than one, carries that type: a bug in the test.
func ToDataplane(payload proto.Message) *felix.ToDataplane {
	m := &felix.ToDataplane{}
	r := m.ProtoReflect()
	want := payload.ProtoReflect().Descriptor().FullName()
	var field protoreflect.FieldDescriptor
	fields := r.Descriptor().Oneofs().ByName("payload").Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		if f.Message() == nil || f.Message().FullName() != want {
			continue
		}
		if field != nil {
			panic(fmt.Sprintf("ToDataplane: %s is carried by both %s and %s", want, field.Name(), f.Name()))
		}
		field = f
	}
	if field == nil {
		panic(fmt.Sprintf("ToDataplane: no payload case carries %s", want))
	}
	r.Set(field, protoreflect.ValueOfMessage(payload.ProtoReflect()))
	return m
}
