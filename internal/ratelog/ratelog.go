// Package ratelog keeps repeated log lines cheap: a slog.Handler that
// passes the first few records of each kind per interval and counts the
// rest, then writes one summary line per kind with how many it held back.
// Input a hostile peer can repeat at will (invalid frames, bad files) logs
// through it, so a flood costs a bounded number of lines; metrics, not
// logs, count every instance.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Defaults for Options' zero values.
const (
	DefaultInterval = 10 * time.Second
	DefaultBurst    = 5
	// DefaultMaxKeys bounds the kinds tracked at once; records of kinds
	// beyond it share one budget.
	DefaultMaxKeys = 1024
)

// KeyAttr names the attribute that sets a record's kind explicitly; it is
// not written out. Without it a record's kind is its level and message.
const KeyAttr = "ratelog.key"

// SummaryMessage is the message of the line that reports held-back records.
const SummaryMessage = "repeated log lines suppressed"

// Key is the attribute that files a record under kind instead of its
// message: log.Warn("bad file", ratelog.Key("parse"), ...).
func Key(kind string) slog.Attr { return slog.String(KeyAttr, kind) }

// Options configure a Handler.
type Options struct {
	// Interval is the window each kind's burst applies to.
	Interval time.Duration
	// Burst is how many records of a kind pass per Interval.
	Burst int
	// MinLevel: records below it always pass (default slog.LevelWarn).
	MinLevel slog.Leveler
	MaxKeys  int
	// Messages, if set, limits only records with one of these messages
	// (and records with a Key); others pass.
	Messages []string
	// OnSuppress, if set, is called for every record held back.
	OnSuppress func(kind string)
}

// state is shared by a Handler and every handler derived from it
// (WithAttrs, WithGroup), so one kind has one budget.
type state struct {
	opts     Options
	messages map[string]bool // nil: every message

	mu    sync.Mutex
	kinds map[string]*window // guarded by mu
	timer *time.Timer        // pending summary; guarded by mu
}

type window struct {
	start   time.Time
	passed  int
	dropped int
	level   slog.Level
	msg     string
	next    slog.Handler // where the summary goes
}

// Handler rate-limits the records it passes to the next handler.
type Handler struct {
	next slog.Handler
	st   *state
}

// New wraps next.
func New(next slog.Handler, opts Options) *Handler {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	if opts.MinLevel == nil {
		opts.MinLevel = slog.LevelWarn
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	st := &state{opts: opts, kinds: map[string]*window{}}
	if len(opts.Messages) > 0 {
		st.messages = map[string]bool{}
		for _, m := range opts.Messages {
			st.messages[m] = true
		}
	}
	return &Handler{next: next, st: st}
}

// Wrap returns log with its warnings (and worse) rate-limited.
func Wrap(log *slog.Logger, opts Options) *slog.Logger {
	return slog.New(New(log.Handler(), opts))
}

// Enabled reports what the next handler reports.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle passes r on unless its kind used up its burst this interval.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	kind, explicit := "", false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == KeyAttr {
			kind, explicit = a.Value.String(), true
			return false
		}
		return true
	})
	if explicit {
		r = withoutKey(r)
	}
	if r.Level < h.st.opts.MinLevel.Level() || (!explicit && h.st.messages != nil && !h.st.messages[r.Message]) {
		return h.next.Handle(ctx, r)
	}
	if !explicit {
		kind = r.Level.String() + " " + r.Message
	}
	if !h.st.admit(kind, r, h.next) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func withoutKey(r slog.Record) slog.Record {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != KeyAttr {
			out.AddAttrs(a)
		}
		return true
	})
	return out
}

// WithAttrs shares h's budgets.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(as), st: h.st}
}

// WithGroup shares h's budgets.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), st: h.st}
}

// Flush writes the summaries of held-back records now (as the interval's
// end would) and starts every kind afresh.
func (h *Handler) Flush() { h.st.flush(true) }

func (s *state) admit(kind string, r slog.Record, next slog.Handler) bool {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.kinds[kind]
	if w == nil {
		if len(s.kinds) >= s.opts.MaxKeys {
			kind = "ratelog.other"
			if w = s.kinds[kind]; w == nil {
				w = &window{start: now, level: r.Level, msg: "(several kinds)", next: next}
				s.kinds[kind] = w
			}
		} else {
			w = &window{start: now, level: r.Level, msg: r.Message, next: next}
			s.kinds[kind] = w
		}
	}
	if w.passed < s.opts.Burst {
		w.passed++
		return true
	}
	w.dropped++
	if s.timer == nil {
		// The summary comes at the end of the first window with drops.
		wait := max(w.start.Add(s.opts.Interval).Sub(now), 0)
		s.timer = time.AfterFunc(wait, func() { s.flush(false) })
	}
	if s.opts.OnSuppress != nil {
		s.opts.OnSuppress(kind)
	}
	return false
}

// flush writes one summary per kind that held records back and resets
// kinds whose window ended (all of them when now is true). A kind still
// dropping keeps a timer running, so a flood yields one summary per
// interval.
func (s *state) flush(all bool) {
	now := time.Now()
	type summary struct {
		kind string
		w    window
	}
	var out []summary
	s.mu.Lock()
	s.timer = nil
	var next time.Time
	for kind, w := range s.kinds {
		if !all && now.Sub(w.start) < s.opts.Interval {
			if w.dropped > 0 && (next.IsZero() || w.start.Before(next)) {
				next = w.start
			}
			continue
		}
		if w.dropped > 0 {
			out = append(out, summary{kind, *w})
		}
		delete(s.kinds, kind)
	}
	if !next.IsZero() {
		s.timer = time.AfterFunc(max(next.Add(s.opts.Interval).Sub(now), 0), func() { s.flush(false) })
	}
	interval := s.opts.Interval
	s.mu.Unlock()
	for _, sm := range out {
		r := slog.NewRecord(now, sm.w.level, SummaryMessage, 0)
		r.AddAttrs(slog.String("repeated", sm.w.msg), slog.String("kind", sm.kind),
			slog.Int("suppressed", sm.w.dropped), slog.Int("logged", sm.w.passed),
			slog.Duration("interval", min(now.Sub(sm.w.start), interval)))
		_ = sm.w.next.Handle(context.Background(), r)
	}
}
