package felixpipe

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/protobuf/proto"
)

// DefaultMaxFrame bounds one incoming frame. Felix does not split large IP
// sets for its driver, so this is far above gRPC's limits; it only guards
// against a corrupt length.
const DefaultMaxFrame = 256 << 20

// headerLen is the size of a frame's length prefix.
const headerLen = 8

// ErrFrameTooLarge is returned for a length prefix above the reader's
// maximum; the stream cannot be resynchronised after it.
var ErrFrameTooLarge = errors.New("felixpipe: frame too large")

// DecodeError is a complete frame whose bytes are not a valid message. The
// stream is still in step, so the caller may go on reading.
type DecodeError struct {
	Len int
	Err error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("felixpipe: decode %d-byte frame: %v", e.Len, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// Reader reads frames.
type Reader struct {
	r   *bufio.Reader
	max uint64
	buf bytes.Buffer
}

// NewReader reads frames from r, refusing any longer than maxFrame bytes
// (DefaultMaxFrame if maxFrame <= 0).
func NewReader(r io.Reader, maxFrame int) *Reader {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), max: uint64(maxFrame)}
}

// ReadFrame returns the next frame's payload, valid until the next call.
// At a clean end between frames it returns io.EOF; an end inside a frame is
// io.ErrUnexpectedEOF.
func (fr *Reader) ReadFrame() ([]byte, error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		return nil, err // io.EOF at a boundary, io.ErrUnexpectedEOF inside the header
	}
	n := binary.LittleEndian.Uint64(hdr[:])
	if n > fr.max {
		return nil, fmt.Errorf("%w: %d bytes (max %d)", ErrFrameTooLarge, n, fr.max)
	}
	fr.buf.Reset()
	// Grow with what arrives rather than trusting the length up front.
	got, err := io.CopyN(&fr.buf, fr.r, int64(n))
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("felixpipe: frame cut after %d of %d bytes: %w", got, n, io.ErrUnexpectedEOF)
		}
		return nil, fmt.Errorf("felixpipe: read frame: %w", err)
	}
	return fr.buf.Bytes(), nil
}

// Read reads the next frame into m. A frame that does not decode returns a
// *DecodeError and leaves the stream in step.
func (fr *Reader) Read(m proto.Message) error {
	b, err := fr.ReadFrame()
	if err != nil {
		return err
	}
	proto.Reset(m)
	if err := proto.Unmarshal(b, m); err != nil {
		return &DecodeError{Len: len(b), Err: err}
	}
	return nil
}

// Writer writes frames; it is safe for concurrent use.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter writes frames to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write marshals m and writes it as one frame with a single write, so a
// reader never sees half a header.
func (fw *Writer) Write(m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("felixpipe: marshal: %w", err)
	}
	frame := make([]byte, headerLen+len(b))
	binary.LittleEndian.PutUint64(frame, uint64(len(b)))
	copy(frame[headerLen:], b)
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if _, err := fw.w.Write(frame); err != nil {
		return fmt.Errorf("felixpipe: write: %w", err)
	}
	return nil
}
