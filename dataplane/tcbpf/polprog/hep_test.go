package polprog

import (
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// The host entry programs tell "no rule matched" from an explicit deny by
// the no-match counter id, which bpf/include/dpd_abi.h hard-codes.
func TestNoMatchIDsMatchABI(t *testing.T) {
	if got := noMatchCounterID(model.Ingress); got != abi.NoMatchIDToWEP {
		t.Errorf("ingress no-match id %#x, abi says %#x", got, abi.NoMatchIDToWEP)
	}
	if got := noMatchCounterID(model.Egress); got != abi.NoMatchIDFromWEP {
		t.Errorf("egress no-match id %#x, abi says %#x", got, abi.NoMatchIDFromWEP)
	}
}
