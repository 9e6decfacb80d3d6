package tcbpf

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// entryVerifierBudget is half the kernel's limit of instructions the
// verifier may process for one program (1,000,000). The entry programs'
// branches multiply the paths it walks; staying under half leaves room for
// the next feature and warns before a change makes the object unloadable.
const entryVerifierBudget = 500000

// TestEntryVerifierBudget loads the entry object and checks how many
// instructions the verifier processed for each program.
func TestEntryVerifierBudget(t *testing.T) {
	d := openTest(t, Options{})
	p := d.Programs()
	for _, c := range []struct {
		name string
		info func() (uint32, bool, error)
	}{
		{"dpd_from_wep", verified(p.FromWEP)},
		{"dpd_to_wep", verified(p.ToWEP)},
		{"dpd_epilogue", verified(p.Epilogue)},
	} {
		n, ok, err := c.info()
		mustNil(t, err)
		if !ok {
			testutil.CannotRun(t, "verifier budget test", "the kernel does not report verified instructions")
		}
		t.Logf("%s: %d instructions verified", c.name, n)
		if n > entryVerifierBudget {
			t.Errorf("%s: the verifier processed %d instructions, over the budget of %d", c.name, n, entryVerifierBudget)
		}
	}
}

// verified reads how many instructions the verifier processed for prog.
func verified(prog *ebpf.Program) func() (uint32, bool, error) {
	return func() (uint32, bool, error) {
		info, err := prog.Info()
		if err != nil {
			return 0, false, err
		}
		n, ok := info.VerifiedInstructions()
		return n, ok, nil
	}
}
