package linux

// Evicted flows: dpd_ct is an LRU map, and when it is full the kernel
// evicts the least recently used entry to make room, with no trace. The
// conntrack scanner walks every entry at each scan anyway, so it keeps
// the flow entries it saw at the previous scan with their counters; one
// that is gone at the next scan without the scanner having expired it
// was evicted (nothing else deletes flow entries: the service flush
// deletes NAT entries only), and is reported ended with reason evicted
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
// about 200 bytes each in the maps, so ~13 MiB at the cap.
const maxTrackedFlows = 65536

// flowTracker follows the flow entries from one scan to the next. Used
// by the scanner goroutine only.
type flowTracker struct {
	max  int
	prev map[tcbpf.CTKey]tcbpf.CTVal // seen at the last scan, not yet this one
	cur  map[tcbpf.CTKey]tcbpf.CTVal // seen this scan
	// untracked counts the flows this scan saw but could not follow.
	untracked int
}

func newFlowTracker(max int) *flowTracker {
	return &flowTracker{max: max, prev: map[tcbpf.CTKey]tcbpf.CTVal{}, cur: map[tcbpf.CTKey]tcbpf.CTVal{}}
}

// begin starts a scan.
func (t *flowTracker) begin() {
	clear(t.cur)
	t.untracked = 0
}

// live records a flow entry the scan found alive; evicted is called
// with the flow it replaced, if its key held another flow at the last
// scan. A flow followed before always stays followed: the cap counts the
// flows of the last scan not yet seen, so it holds whatever the walk's
// order.
func (t *flowTracker) live(k *tcbpf.CTKey, v *tcbpf.CTVal, evicted func(*tcbpf.CTKey, *tcbpf.CTVal)) {
	if k.Dir == abi.DirNAT {
		return
	}
	p, had := t.prev[*k]
	if had {
		delete(t.prev, *k)
		if p.Created != v.Created && evicted != nil {
			evicted(k, &p)
		}
	} else if len(t.cur)+len(t.prev) >= t.max {
		t.untracked++
		return
	}
	t.cur[*k] = *v
}

// expired records a flow entry the scan deleted: it is reported as
// expired, not evicted.
func (t *flowTracker) expired(k *tcbpf.CTKey) {
	delete(t.prev, *k)
}

// end finishes a scan: every flow of the last scan not seen since went
// without the scanner, and is passed to evicted with its last counters.
// This scan's flows are the next one's reference.
func (t *flowTracker) end(evicted func(*tcbpf.CTKey, *tcbpf.CTVal)) {
	if evicted != nil {
		for k, v := range t.prev {
			evicted(&k, &v)
		}
	}
	clear(t.prev)
	t.prev, t.cur = t.cur, t.prev
}

// abort ends a scan that did not see every entry: what it did not see
// may still be there, so nothing is reported and everything seen stays
// followed.
func (t *flowTracker) abort() {
	for k, v := range t.cur {
		t.prev[k] = v
	}
	clear(t.cur)
}

// tracked is how many flows the next scan checks.
func (t *flowTracker) tracked() int { return len(t.prev) }
