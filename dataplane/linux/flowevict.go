package linux

// Evicted flows: dpd_conntrack refuses new flows when full, but an older
// dpd's dpd_ct, read and written during an upgrade, is an LRU map, and
// when it is full the kernel evicts the least recently used entry to make
// room, with no trace. The
// conntrack scanner walks every entry at each scan anyway, so it keeps
// the flow entries it saw at the previous scan with their counters; one
// that is gone at the next scan without the scanner having expired it
// was evicted (nothing else deletes flow entries: the service flush
// deletes NAT entries only, and an entry the scan moves into
// dpd_conntrack is seen there under its key; entries under a legacy key,
// which the move changes, are not followed), and is reported ended with reason evicted
// and the counters it had when last seen. An entry whose key is seen
// again with another creation time is a new flow in the evicted one's
// place: the old one is reported the same way. The set is capped
// (maxTrackedFlows): flows beyond it are counted, not followed, so their
// eviction goes unreported; flows already followed keep their place.

import (
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// maxTrackedFlows bounds the flows the scanner follows between scans:
// about 150 bytes each, so ~10 MiB at the cap.
const maxTrackedFlows = 65536

// flowTracker follows the flow entries from one scan to the next. Used
// by the scanner goroutine only.
type flowTracker struct {
	max   int
	epoch uint32                      // the scan under way
	flows map[tcbpf.CTKey]trackedFlow // followed flows, as last seen
	// untracked counts the flows this scan saw but could not follow.
	untracked int
}

// trackedFlow is a followed flow's entry and the scan that last saw it.
type trackedFlow struct {
	v     tcbpf.CTVal
	epoch uint32
}

func newFlowTracker(max int) *flowTracker {
	return &flowTracker{max: max, flows: map[tcbpf.CTKey]trackedFlow{}}
}

// begin starts a scan.
func (t *flowTracker) begin() {
	t.epoch++
	t.untracked = 0
}

// live records a flow entry the scan found alive; evicted is called
// with the flow it replaced, if its key held another flow before. A flow
// followed before always stays followed: the cap counts every followed
// flow, seen yet by this scan or not, so it holds whatever the walk's
// order.
func (t *flowTracker) live(k *tcbpf.CTKey, v *tcbpf.CTVal, evicted func(*tcbpf.CTKey, *tcbpf.CTVal)) {
	if k.Dir == abi.DirNAT || tcbpf.CTLegacyKey(k) {
		return // a legacy key changes when the scan moves its entry: not followable
	}
	if f, had := t.flows[*k]; had {
		if f.v.Created != v.Created && f.epoch != t.epoch && evicted != nil {
			evicted(k, &f.v)
		}
	} else if len(t.flows) >= t.max {
		t.untracked++
		return
	}
	t.flows[*k] = trackedFlow{v: *v, epoch: t.epoch}
}

// expired records a flow entry the scan deleted: it is reported as
// expired, not evicted.
func (t *flowTracker) expired(k *tcbpf.CTKey) {
	delete(t.flows, *k)
}

// end finishes a scan: every followed flow it did not see went without
// the scanner, and is passed to evicted with its last counters.
func (t *flowTracker) end(evicted func(*tcbpf.CTKey, *tcbpf.CTVal)) {
	for k, f := range t.flows {
		if f.epoch == t.epoch {
			continue
		}
		if evicted != nil {
			evicted(&k, &f.v)
		}
		delete(t.flows, k)
	}
}

// abort ends a scan that did not see every entry: what it did not see
// may still be there, so nothing is reported and every followed flow
// stays followed (the next scan checks them all again).
func (t *flowTracker) abort() {}

// tracked is how many flows are followed.
func (t *flowTracker) tracked() int { return len(t.flows) }
