package tcbpf

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// TestDecodeFlowEvent: the field-by-field decoder reads what the struct
// layout says (encoding/binary as the reference), every byte distinct.
func TestDecodeFlowEvent(t *testing.T) {
	raw := make([]byte, abi.FlowEventLen)
	for i := range raw {
		raw[i] = byte(i*7 + 1)
	}
	var want, got FlowEvent
	if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, &want); err != nil {
		t.Fatal(err)
	}
	want.EvPad = [6]uint8{}
	decodeFlowEvent(raw, &got)
	if got != want {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}
