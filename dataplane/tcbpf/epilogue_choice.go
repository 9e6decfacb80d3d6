package tcbpf

import "path/filepath"

// The epilogue call is a pinned choice (choicepin.go): epilogue/choice
// holds choiceDirect or choiceIndirect, what the pinned policy programs
// call.
const (
	epilogueChoicePin = "choice"
	choiceDirect      = uint32(1)
	choiceIndirect    = uint32(2)
)

// epilogueCall decides how policy programs call the epilogue: as
// configured, else as pinned by an earlier dpd, else measured. A
// configured or measured decision is pinned; a failed probe's fallback
// is not. The pin only saves reloads: trouble with it is logged, never
// fatal.
func (d *Datapath) epilogueCall(dir string) (direct bool, why string) {
	pin, err := openChoicePin(filepath.Join(dir, epilogueChoicePin))
	if err != nil {
		d.log.Warn("epilogue call: no pinned choice; a restart measures again", "err", err)
	}
	if pin != nil {
		defer pin.close()
	}
	if pin != nil && d.opts.Epilogue == EpilogueAuto {
		switch v, err := pin.get(); {
		case err != nil:
			d.log.Warn("epilogue call: read the pinned choice", "err", err)
		case v == choiceDirect || v == choiceIndirect:
			return v == choiceDirect, pin.keptReason()
		}
	}
	direct, why, decided := chooseEpilogueCall(d.opts.Epilogue)
	if pin == nil || !decided {
		return direct, why
	}
	v := choiceIndirect
	if direct {
		v = choiceDirect
	}
	if err := pin.set(v); err != nil {
		d.log.Warn("epilogue call: pin the choice; a restart measures again", "err", err)
	}
	return direct, why
}
