package tcbpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Set keys carry the member's address family (4 or 6) in a byte that
// earlier versions left zero, so a pinned map of that layout has the same
// sizes and passes ebpf's compatibility check. Its members cannot be
// converted (an IPv6 prefix such as a01:203::/32 has the bytes of
// 10.1.2.3/32), so such a map is replaced by an empty one: the programs
// of the previous dpd keep the old map while they run, the set ids stay
// in dpd_ipset_ids, and the controller's resync rewrites every member.

// familyLess reports whether m, a set map with the family byte at off,
// holds a key without a family: one of the earlier layout (every key of
// the current layout has one, so the first key decides).
func familyLess(m *ebpf.Map, off int) (bool, error) {
	info, err := m.Info()
	if err != nil {
		return false, fmt.Errorf("map info: %w", err)
	}
	if int(info.KeySize) <= off {
		return false, nil
	}
	key := make([]byte, info.KeySize)
	if err := m.NextKey(nil, key); errors.Is(err, ebpf.ErrKeyNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("first key: %w", err)
	}
	return key[off] == 0, nil
}

// layoutChanged says why a pinned map that ebpf finds compatible still
// has another layout ("" when it has none); such maps are not converted.
func layoutChanged(name string, old *ebpf.Map) (string, error) {
	if name != abi.MapIPSets {
		return "", nil
	}
	old2, err := familyLess(old, abi.IPSetKeyFamily)
	if err != nil || !old2 {
		return "", err
	}
	return "members keyed without an address family", nil
}
