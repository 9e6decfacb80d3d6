package policysync

import (
	"fmt"

	"github.com/dpd-dev/dpd/server/felixwire"
)

// Encoding is the Felix generation clients are served in. Dikastes and
// the other policy-sync clients of Calico v3.28-v3.31 read only their own
// generation's messages (policies named by tier and name, TierInfo lists of
// names): served the current form, they fail to decode every endpoint
// update with tiers. Clients cannot say which they read, so by default the
// generation follows the controller's: the clients on a node come from the
// same Calico release as its Felix.
type Encoding int

const (
	// EncodingAuto serves the generation the controller last showed.
	EncodingAuto Encoding = iota
	// EncodingCurrent serves Calico v3.32 and later.
	EncodingCurrent
	// EncodingLegacy serves Calico v3.28 to v3.31.
	EncodingLegacy
)

// Encodings are the names ParseEncoding accepts, for flag help.
const Encodings = "auto, current (Calico v3.32 and later), v3.28 (Calico v3.28 to v3.31)"

// ParseEncoding parses an encoding name.
func ParseEncoding(s string) (Encoding, error) {
	switch s {
	case "", "auto":
		return EncodingAuto, nil
	case "current":
		return EncodingCurrent, nil
	case "v3.28", "legacy":
		return EncodingLegacy, nil
	}
	return 0, fmt.Errorf("unknown policy-sync encoding %q (want %s)", s, Encodings)
}

func (e Encoding) String() string {
	switch e {
	case EncodingCurrent:
		return "current"
	case EncodingLegacy:
		return "v3.28"
	}
	return "auto"
}

// ControllerGeneration tells the processor which generation the
// controller showed it speaks; under EncodingAuto clients are served that
// one from their next message on.
func (p *Processor) ControllerGeneration(g felixwire.Generation) {
	p.ctrlLegacy.Store(g == felixwire.Legacy)
}

// generation is the generation clients are served in now.
func (p *Processor) generation() felixwire.Generation {
	switch p.opts.Encoding {
	case EncodingCurrent:
		return felixwire.Current
	case EncodingLegacy:
		return felixwire.Legacy
	}
	if p.ctrlLegacy.Load() {
		return felixwire.Legacy
	}
	return felixwire.Current
}

// MarshalText implements encoding.TextMarshaler (flags).
func (e Encoding) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (flags).
func (e *Encoding) UnmarshalText(b []byte) error {
	v, err := ParseEncoding(string(b))
	if err != nil {
		return err
	}
	*e = v
	return nil
}
