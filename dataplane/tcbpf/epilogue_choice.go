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
// configured, else as pinned by an earlier dpd, else measured. The
// decision is pinned.
func (d *Datapath) epilogueCall(dir string) (direct bool, why string, err error) {
	pin, err := openChoicePin(filepath.Join(dir, epilogueChoicePin))
	if err != nil {
		return false, "", err
	}
	defer pin.close()
	if d.opts.Epilogue == EpilogueAuto {
		v, err := pin.get()
		if err != nil {
			return false, "", err
		}
		if v == choiceDirect || v == choiceIndirect {
			return v == choiceDirect, pin.keptReason(), nil
		}
	}
	direct, why = chooseEpilogueCall(d.opts.Epilogue)
	v := choiceIndirect
	if direct {
		v = choiceDirect
	}
	if err := pin.set(v); err != nil {
		return false, "", err
	}
	return direct, why, nil
}
