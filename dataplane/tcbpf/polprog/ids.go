package polprog

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// counterID derives a stable, non-zero u64 from its parts: the first 8 bytes
// of a sha256 over length-prefixed fields. The same rule in the same place
// gets the same id in every program, so counters survive recompiles and are
// shared by endpoints that share the policy.
func counterID(parts ...string) uint64 {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.LittleEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	id := binary.LittleEndian.Uint64(h.Sum(nil)[:8])
	if id == 0 {
		id = 1 // 0 means "no rule" in dpd_state.rule_id
	}
	return id
}

func ruleCounterID(dir model.Direction, kind, tier, policy string, index int, ruleID string) uint64 {
	return counterID("rule", dir.String(), kind, tier, policy, strconv.Itoa(index), ruleID)
}

func tierDefaultCounterID(dir model.Direction, tier string) uint64 {
	return counterID(SyntheticTierDefault, dir.String(), tier)
}

func noMatchCounterID(dir model.Direction) uint64 {
	return counterID(SyntheticNoMatch, dir.String())
}
