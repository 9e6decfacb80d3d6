package tcbpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// FlowEvent is struct dpd_flow_event: one new flow's decision, written to
// dpd_events by the epilogue (or the entry, when no policy is installed).
type FlowEvent = bpf.DpdDpdFlowEvent

// DefaultDenyInterval is how often a denied flow is reported at most: the
// packets in between are counted into its next event.
const DefaultDenyInterval = time.Second

// ErrEventsClosed is returned by EventReader.Read after Close.
var ErrEventsClosed = errors.New("flow event reader closed")

// SetEvents switches flow events on or off. While on, each denied flow is
// reported at most once per denyInterval (0: every packet). Off costs the
// policy path one array lookup; conntrack hits never look.
func (d *Datapath) SetEvents(on bool, denyInterval time.Duration) error {
	return d.SetEventsPreview(on, denyInterval, false)
}

// SetEventsPreview is SetEvents that, with preview (and on), also runs
// the staged preview programs (InstallPreview) on every decided packet.
func (d *Datapath) SetEventsPreview(on bool, denyInterval time.Duration, preview bool) error {
	// The programs pick a flow's slot with a mask: use the largest power
	// of two of slots the map holds.
	slots := uint32(1)
	for slots*2 <= d.objs.DpdEvDeny.MaxEntries() && slots < 1<<31 {
		slots *= 2
	}
	cfg := bpf.DpdDpdEvCfg{DenyMask: slots - 1}
	if on {
		cfg.Flags = abi.EvCfgOn
		if preview {
			cfg.Flags |= abi.EvCfgPreview
		}
	}
	if denyInterval > 0 {
		cfg.DenyIntervalNs = uint64(denyInterval)
	}
	if err := d.objs.DpdEvCfg.Update(uint32(0), &cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set flow event config: %w", err)
	}
	return nil
}

// EventDrops sums, over CPUs, the events a full ring could not take.
func (d *Datapath) EventDrops() (uint64, error) {
	var per []uint64
	if err := d.objs.DpdEvDrops.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("read flow event drops: %w", err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

// EventPoll is how often a reader looks at a ring it found empty: the
// programs submit events without waking it (a wakeup per event cost ~20 us
// of CPU at thousands of events a second), so an event waits at most this
// long before a blocked Read sees it.
const EventPoll = 10 * time.Millisecond

// EventReader reads dpd_events. One reader per ring: records are consumed.
type EventReader struct {
	r        *ringbuf.Reader
	rec      ringbuf.Record
	deadline time.Time // the caller's (SetDeadline); zero: none
}

// NewEventReader opens a reader on the ring. The caller closes it.
func (d *Datapath) NewEventReader() (*EventReader, error) {
	r, err := ringbuf.NewReader(d.objs.DpdEvents)
	if err != nil {
		return nil, fmt.Errorf("open flow event ring: %w", err)
	}
	e := &EventReader{r: r}
	e.r.SetDeadline(time.Now().Add(EventPoll))
	return e, nil
}

// Read blocks until an event arrives, the deadline passes
// (os.ErrDeadlineExceeded) or the reader is closed (ErrEventsClosed).
func (e *EventReader) Read() (FlowEvent, error) {
	var ev FlowEvent
	for {
		err := e.r.ReadInto(&e.rec)
		if err == nil {
			break
		}
		if errors.Is(err, ringbuf.ErrClosed) {
			return ev, ErrEventsClosed
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return ev, fmt.Errorf("read flow event: %w", err)
		}
		// The ring was empty for a poll: the caller's deadline, or the
		// next poll.
		now := time.Now()
		if !e.deadline.IsZero() && !now.Before(e.deadline) {
			return ev, os.ErrDeadlineExceeded
		}
		e.r.SetDeadline(e.nextWait(now))
	}
	if len(e.rec.RawSample) < abi.FlowEventLen {
		return ev, fmt.Errorf("flow event of %d bytes, want %d", len(e.rec.RawSample), abi.FlowEventLen)
	}
	decodeFlowEvent(e.rec.RawSample, &ev)
	return ev, nil
}

// decodeFlowEvent reads struct dpd_flow_event from b (at least
// abi.FlowEventLen bytes) field by field: reflection would cost more than
// the rest of the read.
func decodeFlowEvent(b []byte, ev *FlowEvent) {
	le := binary.LittleEndian
	ev.TsNs = le.Uint64(b[abi.EvTsNs:])
	ev.RuleId = le.Uint64(b[abi.EvRuleID:])
	copy(ev.Saddr[:], b[abi.EvSaddr:abi.EvSaddr+16])
	copy(ev.Daddr[:], b[abi.EvDaddr:abi.EvDaddr+16])
	ev.Sport = le.Uint16(b[abi.EvSport:])
	ev.Dport = le.Uint16(b[abi.EvDport:])
	ev.Proto, ev.Family, ev.Dir, ev.Verdict = b[abi.EvProto], b[abi.EvFamily], b[abi.EvDir], b[abi.EvVerdict]
	ev.Ifindex = le.Uint32(b[abi.EvIfindex:])
	ev.Flags = le.Uint32(b[abi.EvFlags:])
	ev.Suppressed = le.Uint32(b[abi.EvSuppressed:])
	ev.PktLen = le.Uint32(b[abi.EvPktLen:])
	copy(ev.NatAddr[:], b[abi.EvNATAddr:abi.EvNATAddr+16])
	ev.NatPort = le.Uint16(b[abi.EvNATPort:])
	ev.Kind, ev.IcmpType = b[abi.EvKind], b[abi.EvICMPType]
	ev.NatSvc = le.Uint32(b[abi.EvNATSvc:])
	ev.IcmpCode = b[abi.EvICMPCode]
	ev.PreviewVerdict = b[abi.EvPreviewVerdict]
	ev.PreviewRuleId = le.Uint64(b[abi.EvPreviewRuleID:])
}

// SetDeadline bounds the next Reads; the zero time blocks forever.
func (e *EventReader) SetDeadline(t time.Time) {
	e.deadline = t
	e.r.SetDeadline(e.nextWait(time.Now()))
}

// nextWait is when a wait on an empty ring from now ends: the next poll,
// or the caller's deadline if sooner.
func (e *EventReader) nextWait(now time.Time) time.Time {
	next := now.Add(EventPoll)
	if !e.deadline.IsZero() && e.deadline.Before(next) {
		return e.deadline
	}
	return next
}

// Pending is the number of bytes not yet read from the ring.
func (e *EventReader) Pending() int { return e.r.AvailableBytes() }

// Close releases the reader; a blocked Read returns ErrEventsClosed.
func (e *EventReader) Close() error { return e.r.Close() }

// MonoClock converts the programs' timestamps (CLOCK_MONOTONIC_COARSE,
// CLOCK_MONOTONIC to a tick; clock.go) to wall-clock time.
type MonoClock struct{ offset time.Duration }

// NewMonoClock samples both clocks once; drift between them (NTP slewing)
// is ignored, which is fine for labelling events.
func NewMonoClock() MonoClock {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for this clock
	now := time.Now()
	return MonoClock{offset: time.Duration(now.UnixNano() - ts.Nano())}
}

// Time is the wall-clock time of a monotonic timestamp in nanoseconds.
func (c MonoClock) Time(ns uint64) time.Time {
	return time.Unix(0, int64(ns)+int64(c.offset))
}

// InstallPreview puts the staged preview program of endpoint slot slot,
// direction dir into dpd_preview. It decides only what events report.
func (d *Datapath) InstallPreview(slot uint32, dir int, prog *ebpf.Program) error {
	idx, err := d.policyIndex(slot, dir)
	if err != nil {
		return err
	}
	if prog == nil {
		return fmt.Errorf("install preview slot %d dir %d: nil program", slot, dir)
	}
	if err := d.objs.DpdPreview.Update(idx, prog, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("install preview slot %d dir %d: %w", slot, dir, err)
	}
	return nil
}

// ClearPreview empties the slot's preview for dir.
func (d *Datapath) ClearPreview(slot uint32, dir int) error {
	idx, err := d.policyIndex(slot, dir)
	if err != nil {
		return err
	}
	if err := d.objs.DpdPreview.Delete(idx); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("clear preview slot %d dir %d: %w", slot, dir, err)
	}
	return nil
}
