package tcbpf

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Requested attach modes (dpd --attach-mode).
const (
	AttachAuto = "auto" // measure the kernel and choose
)

// Auto mode prefers TCX (links are pinned and updated atomically, and
// coexist with other TC users) unless its first attach costs a grace
// period: a hook's first TCX attach that costs this much more than a legacy
// clsact + filter attach, and at least tcxSlowFloor, makes legacy TC the
// faster path for every new interface.
const (
	tcxSlowFactor = 3
	tcxSlowFloor  = 2 * time.Millisecond
)

// AttachChoice is the attach mode in force and why.
type AttachChoice struct {
	Mode   AttachMode
	Reason string
	// Costs are the measured kernel costs; zero when the mode was forced.
	Costs KernelCosts
}

// ParseAttachMode validates a requested mode: auto, tcx or tc.
func ParseAttachMode(s string) (string, error) {
	switch s {
	case "", AttachAuto:
		return AttachAuto, nil
	case string(AttachTCX), string(AttachTC):
		return s, nil
	}
	return "", fmt.Errorf("attach mode %q: want auto, tcx or tc", s)
}

// ChooseAttachMode decides the attach mode for a requested one. For auto it
// reads the kernel's costs through measure.
func ChooseAttachMode(requested string, measure func() (KernelCosts, error)) (AttachChoice, error) {
	mode, err := ParseAttachMode(requested)
	if err != nil {
		return AttachChoice{}, err
	}
	if mode != AttachAuto {
		return AttachChoice{Mode: AttachMode(mode), Reason: "requested"}, nil
	}
	c, err := measure()
	if err != nil {
		return AttachChoice{}, fmt.Errorf("measure kernel costs: %w", err)
	}
	return chooseFromCosts(c), nil
}

func chooseFromCosts(c KernelCosts) AttachChoice {
	if c.TCXErr != nil {
		return AttachChoice{Mode: AttachTC, Costs: c, Reason: fmt.Sprintf("TCX unavailable: %v", c.TCXErr)}
	}
	if c.TCXFirstAttach >= tcxSlowFloor && c.TCXFirstAttach >= tcxSlowFactor*c.LegacyAttach {
		return AttachChoice{Mode: AttachTC, Costs: c, Reason: fmt.Sprintf(
			"a first TCX attach costs %s against %s for clsact + filter (an RCU grace period on this kernel)",
			c.TCXFirstAttach.Round(10*time.Microsecond), c.LegacyAttach.Round(10*time.Microsecond))}
	}
	return AttachChoice{Mode: AttachTCX, Costs: c, Reason: fmt.Sprintf(
		"a first TCX attach costs %s (clsact + filter %s)",
		c.TCXFirstAttach.Round(10*time.Microsecond), c.LegacyAttach.Round(10*time.Microsecond))}
}

// The attach mode is a pinned choice (choicepin.go) at PinDir/attach_mode.
const (
	attachModePin = "attach_mode"
	pinnedTCX     = uint32(1)
	pinnedTC      = uint32(2)
)

// PinAttachChoice pins c as the boot's attach mode. An automatic choice
// (auto) gives way to the mode an earlier dpd pinned, so a restart keeps
// the interfaces' attachments; its measured costs stay, for the report.
// The pin only saves re-attaching: on an error c stands, unpinned.
func PinAttachChoice(pinDir string, c AttachChoice, auto bool) (AttachChoice, error) {
	if pinDir == "" {
		pinDir = abi.PinDir
	}
	pin, err := openChoicePin(filepath.Join(pinDir, attachModePin))
	if err != nil {
		return c, err
	}
	defer pin.close()
	if auto && c.Costs.TCXErr == nil {
		v, err := pin.get()
		if err != nil {
			return c, err
		}
		kept := AttachChoice{Costs: c.Costs, Reason: pin.keptReason() + "; measured now: " + c.Reason}
		switch v {
		case pinnedTCX:
			kept.Mode = AttachTCX
			return kept, nil
		case pinnedTC:
			kept.Mode = AttachTC
			return kept, nil
		}
	}
	v := pinnedTCX
	if c.Mode == AttachTC {
		v = pinnedTC
	}
	return c, pin.set(v)
}
