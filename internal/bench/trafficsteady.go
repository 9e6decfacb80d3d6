package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dpd-dev/dpd/internal/bench/tcpload"
)

// Conntrack in its steady state. A connection-rate measurement leaves two
// conntrack entries per connection on dpd's path; the scanner deletes
// them once idle past their timeout (10 s for a closed TCP flow), and from
// then on every new entry takes a node of the LRU map that an older flow
// freed. Those cost dpd's programs more than the untouched nodes of a
// fresh map: on the kernel of BENCHMARKS.md 5.6 µs per connection on a
// fresh map against 7.6-8.2 µs once nodes were being reused, whatever the
// rule list. A node that has served connections for a minute is in the
// second state, and without this the rule lists measured first would see
// the first state and the last one the second. So before the first
// connection-rate measurement every path opens new connections for
// Scale.TrafficSteady, all paths at once; the nftables node has its port
// rules in place meanwhile, so that netfilter's table (which keeps a
// closed flow 120 s) holds those flows too when its rule lists are
// measured. No path spends more than half of its source addresses and
// ports on it: the measurements need the rest.

// trafficSteady runs new connections on every path for d (nothing when d
// is 0 or the connection rate is not measured) and records d in the
// results.
func (r *runner) trafficSteady(ctx context.Context, t *trafficNet, d time.Duration, nft trafficRules) error {
	if d <= 0 || !r.o.measures("crr") {
		return nil
	}
	if err := t.paths[pathNFT].node.loadNFT(ctx, nftRuleset("ports", t.paths[pathNFT].server.host, nft)); err != nil {
		return fmt.Errorf("steady state: %w", err)
	}
	r.progress("P7: %s of new connections on every path first, so that conntrack reuses entries as on a busy node", d)
	var wg sync.WaitGroup
	errs := make([]error, len(t.paths))
	ops := make([]int64, len(t.paths))
	for i, p := range t.paths {
		reserve := p.src.Left() / 2
		wg.Add(1)
		go func() {
			defer wg.Done()
			end := time.Now().Add(d)
			for left := time.Until(end); left > 0 && ctx.Err() == nil && p.src.Left() > reserve; left = time.Until(end) {
				err := p.client.do(func() error {
					res, err := tcpload.ConnectionRate(p.dst, p.src, min(left, time.Second))
					ops[i] += res.Ops
					return err
				})
				if err != nil {
					errs[i] = fmt.Errorf("%s: %w", trafficPathNames[i], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("steady state: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.res.Traffic.Steady = d
	r.progress("P7: steady state reached: %d connections on dpd's path", ops[pathDPD])
	return nil
}
