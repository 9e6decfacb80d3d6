package felixpipe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/proto/felix"
)

func frame(payload []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(payload)))
	return append(out, payload...)
}

func TestRoundTrip(t *testing.T) {
	msgs := []*felix.ToDataplane{
		{SequenceNumber: 1, Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}},
		{}, // an empty message is a zero-length frame
		{SequenceNumber: 3, Payload: &felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{Id: "s", Members: []string{"10.0.0.1"}}}},
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, m := range msgs {
		if err := w.Write(m); err != nil {
			t.Fatal(err)
		}
	}
	// The wire format: 8-byte little-endian length, then the message.
	first, _ := proto.Marshal(msgs[0])
	if !bytes.HasPrefix(buf.Bytes(), frame(first)) {
		t.Fatalf("first frame = % x, want % x", buf.Bytes()[:len(first)+8], frame(first))
	}
	r := NewReader(&buf, 0)
	for i, want := range msgs {
		var got felix.ToDataplane
		if err := r.Read(&got); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("read %d = %v, want %v", i, &got, want)
		}
	}
	if err := r.Read(&felix.ToDataplane{}); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadErrors(t *testing.T) {
	valid, _ := proto.Marshal(&felix.ToDataplane{SequenceNumber: 7})
	tests := []struct {
		name  string
		input []byte
		max   int
		want  error // errors.Is target of the first Read
	}{
		{"empty stream", nil, 0, io.EOF},
		{"cut header", []byte{1, 0, 0}, 0, io.ErrUnexpectedEOF},
		{"cut payload", frame(valid)[:len(valid)+8-1], 0, io.ErrUnexpectedEOF},
		{"huge length, little data", binary.LittleEndian.AppendUint64(nil, 1<<62), 0, ErrFrameTooLarge},
		{"over the reader's max", frame(valid), len(valid) - 1, ErrFrameTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := NewReader(bytes.NewReader(tt.input), tt.max).Read(&felix.ToDataplane{})
			if !errors.Is(err, tt.want) {
				t.Fatalf("Read = %v, want %v", err, tt.want)
			}
		})
	}
}

// A frame that does not decode is reported and the next frame still reads.
func TestDecodeErrorKeepsStep(t *testing.T) {
	good, _ := proto.Marshal(&felix.ToDataplane{SequenceNumber: 9})
	in := append(frame([]byte{0xff, 0xff, 0xff}), frame(good)...)
	r := NewReader(bytes.NewReader(in), 0)
	var de *DecodeError
	if err := r.Read(&felix.ToDataplane{}); !errors.As(err, &de) || de.Len != 3 {
		t.Fatalf("bad frame: %v, want a DecodeError of 3 bytes", err)
	}
	var m felix.ToDataplane
	if err := r.Read(&m); err != nil || m.GetSequenceNumber() != 9 {
		t.Fatalf("next frame: %v %v", &m, err)
	}
}

// FuzzFrameReader: no input makes the reader panic or loop, and the frames
// it returns (decoded or not) account for exactly the bytes it consumed.
func FuzzFrameReader(f *testing.F) {
	good, _ := proto.Marshal(&felix.ToDataplane{SequenceNumber: 1, Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}})
	f.Add(frame(good))
	f.Add(append(frame(good), frame(nil)...))
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff})
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<40))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), 1<<20)
		consumed := 0
		for {
			var m felix.ToDataplane
			err := r.Read(&m)
			var de *DecodeError
			switch {
			case err == nil:
				n := binary.LittleEndian.Uint64(data[consumed:])
				consumed += 8 + int(n)
			case errors.As(err, &de):
				consumed += 8 + de.Len
			case errors.Is(err, io.EOF):
				if consumed != len(data) {
					t.Fatalf("EOF after %d of %d bytes", consumed, len(data))
				}
				return
			default:
				if consumed >= len(data) {
					t.Fatalf("error %v with nothing left to read", err)
				}
				return
			}
			if consumed > len(data) {
				t.Fatalf("consumed %d of %d bytes", consumed, len(data))
			}
		}
	})
}
