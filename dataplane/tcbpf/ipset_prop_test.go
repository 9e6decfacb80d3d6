package tcbpf

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// The property: any sequence of ReplaceIPSet, UpdateIPSet, RemoveIPSet and
// restarts leaves dpd_ipsets and dpd_ipset_idx holding exactly what a
// plain reference model of the sets says. With maps too small for the
// sets, writes fail part-way; then the bookkeeping must still describe
// the maps, and the reference adopts it.

// propPool mixes nested prefixes, both families, unmasked duplicates of a
// network (one key), and ip+port members.
var propPool = []model.IPSetMember{
	pm("10.0.0.0/8"), pm("10.1.0.0/16"), pm("10.1.2.0/24"), pm("10.1.2.3/32"), pm("10.1.2.4/32"),
	pm("10.9.9.9/32"), pm("192.168.0.0/16"), pm("192.168.1.1/32"), pm("0.0.0.0/0"), pm("10.1.2.3/16"),
	pm("fd00::/16"), pm("fd00::1/128"), pm("fd00::2/128"), pm("::ffff:10.1.2.3/128"),
	pm("a01:203::/32"), pm("a00::/8"), pm("::/0"), // bytes like 10.1.2.3/32, 10/8 and 0/0
	{Prefix: netip.MustParsePrefix("a01:203::/32"), Proto: 6, Port: 80},
	{Prefix: netip.MustParsePrefix("10.1.2.3/32"), Proto: 6, Port: 80},
	{Prefix: netip.MustParsePrefix("10.1.2.3/32"), Proto: 17, Port: 53},
	{Prefix: netip.MustParsePrefix("fd00::1/128"), Proto: 6, Port: 443},
}

var propNames = []string{"s:a", "s:b", "s:c", "s:d"}

func pm(s string) model.IPSetMember { return model.IPSetMember{Prefix: netip.MustParsePrefix(s)} }

// refKey is the dpd_ipsets key of m in set id, built without the code
// under test.
func refKey(id uint32, m model.IPSetMember) ipsetKey {
	p := m.Prefix.Masked()
	k := ipsetKey{Prefixlen: uint32(abi.IPSetKeyFixedBits + p.Bits()), SetId: id, Proto: m.Proto,
		Port: binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, m.Port))}
	copy(k.Addr[:], p.Addr().AsSlice())
	k.Family = 6
	if p.Addr().Is4() {
		k.Family = 4
	}
	return k
}

// propRun drives one sequence of ops, read from data, against d (which it
// may reopen) and checks the maps after each.
type propRun struct {
	t       *testing.T
	d       *Datapath
	opts    Options
	opened  func(*Datapath)                  // closes a reopened Datapath when the owner ends
	model   map[string]map[ipsetKey]struct{} // by name; keys with set id 0
	mayFail bool                             // the maps are too small for the sets
	failed  int                              // ops the maps' size made fail
}

func newPropRun(t *testing.T, d *Datapath, opts Options, opened func(*Datapath)) *propRun {
	_, err := d.RetainIPSets(nil) // a fuzz worker reuses d across inputs
	mustNil(t, err)
	r := &propRun{t: t, d: d, opts: opts, opened: opened, model: map[string]map[ipsetKey]struct{}{}}
	r.check("start", true)
	return r
}

func (r *propRun) members(b []byte) []model.IPSetMember {
	var out []model.IPSetMember
	for _, c := range b {
		out = append(out, propPool[int(c)%len(propPool)])
	}
	return out
}

func keysOf(ms []model.IPSetMember) map[ipsetKey]struct{} {
	out := map[ipsetKey]struct{}{}
	for _, m := range ms {
		out[refKey(0, m)] = struct{}{}
	}
	return out
}

// step runs the op in op on the set in name with members from ms.
func (r *propRun) step(i int, op, name byte, ms []byte) {
	n := propNames[int(name)%len(propNames)]
	half := len(ms) / 2
	var err error
	var what string
	switch op % 16 {
	case 0, 1, 2, 3, 4, 5:
		what = "replace"
		err = r.d.ReplaceIPSet(n, model.IPSetNet, r.members(ms))
		if err == nil {
			r.model[n] = keysOf(r.members(ms))
		}
	case 6, 7, 8, 9, 10, 11:
		what = "update"
		set, ok := r.model[n]
		if !ok {
			if r.d.UpdateIPSet(n, r.members(ms), nil) == nil {
				r.t.Fatalf("step %d: update of unknown set %s succeeded", i, n)
			}
			return
		}
		added, removed := r.members(ms[:half]), r.members(ms[half:])
		err = r.d.UpdateIPSet(n, added, removed)
		if err == nil {
			maps.DeleteFunc(set, func(k ipsetKey, _ struct{}) bool { _, gone := keysOf(removed)[k]; return gone })
			maps.Copy(set, keysOf(added))
		}
	case 12, 13, 14:
		what = "remove"
		err = r.d.RemoveIPSet(n)
		if err == nil {
			delete(r.model, n)
		}
	case 15:
		what = "reopen"
		mustNil(r.t, r.d.Close())
		d, err := Open(r.opts)
		if err != nil {
			r.t.Fatalf("step %d: reopen: %v", i, err)
		}
		r.opened(d)
		r.d = d
	}
	if err != nil && !r.mayFail {
		r.t.Fatalf("step %d: %s %s: %v", i, what, n, err)
	}
	if err != nil {
		// A full map: the kernel took part of the change. The bookkeeping
		// is checked against the maps; the reference adopts it.
		r.failed++
		r.adopt()
	}
	r.check(fmt.Sprintf("step %d: %s %s %v (err %v)", i, what, n, r.members(ms), err), err == nil)
}

// adopt makes the reference what the Datapath believes.
func (r *propRun) adopt() {
	r.model = map[string]map[ipsetKey]struct{}{}
	for _, n := range propNames {
		s, ok := r.d.sets[nameString(encodeName(n))]
		if !ok {
			continue
		}
		set := map[ipsetKey]struct{}{}
		for _, m := range s.members {
			set[m.key(0)] = struct{}{}
		}
		r.model[n] = set
	}
}

// check compares both maps with the reference. The index is compared only
// when no failed flush left entries to repair.
func (r *propRun) check(step string, strict bool) {
	r.t.Helper()
	want := map[ipsetKey]struct{}{}
	wantIdx := map[idxKey]string{}
	type plain struct {
		set    uint32
		family uint8
		p      netip.Prefix
	}
	var plains []plain
	for n, set := range r.model {
		id, ok := r.d.SetID(n)
		if !ok {
			r.t.Fatalf("%s: set %s has no id", step, n)
		}
		for k := range set {
			k.SetId = id
			want[k] = struct{}{}
			if k.Proto == 0 && k.Port == 0 {
				a := netip.AddrFrom16(k.Addr)
				plains = append(plains, plain{id, k.Family, netip.PrefixFrom(a, int(k.Prefixlen)-abi.IPSetKeyFixedBits)})
			}
		}
	}
	if len(r.d.sets) != len(r.model) {
		r.t.Fatalf("%s: %d sets have ids, want %d", step, len(r.d.sets), len(r.model))
	}
	got := map[ipsetKey]struct{}{}
	var k ipsetKey
	var v uint32
	it := r.d.Maps().IPSets.Iterate()
	for it.Next(&k, &v) {
		got[k] = struct{}{}
	}
	mustNil(r.t, it.Err())
	if !maps.Equal(got, want) {
		r.t.Fatalf("%s: dpd_ipsets holds %d keys %v, want %d %v", step, len(got), got, len(want), want)
	}
	if !strict && len(r.d.setIdx.unsure) > 0 {
		return
	}
	// Every plain member is an entry, with the combination of the sets of
	// every plain member of its family containing it.
	for _, e := range plains {
		var val []uint32
		for _, o := range plains {
			if o.family == e.family && o.p.Bits() <= e.p.Bits() && netip.PrefixFrom(e.p.Addr(), o.p.Bits()).Masked() == o.p {
				val = append(val, o.set)
			}
		}
		slices.Sort(val)
		wantIdx[idxPfx{addr: e.p.Addr().As16(), bits: uint8(e.p.Bits()), family: e.family}.key()] = fmt.Sprint(slices.Compact(val))
	}
	// What a policy sees: the hash's entry, else the trie's.
	visible := map[idxKey]idxVal{}
	for _, m := range []*ebpf.Map{r.d.IPSetIndex(), r.d.IPSetIndexHash()} {
		var ik idxKey
		var iv idxVal
		iit := m.Iterate()
		for iit.Next(&ik, &iv) {
			visible[ik] = iv
		}
		mustNil(r.t, iit.Err())
	}
	gotIdx := map[idxKey]string{}
	uses := map[idxVal]int{}
	for ik, iv := range visible {
		c := r.d.setIdx.combos.byID[iv]
		if c == nil || c.refs == 0 {
			r.t.Fatalf("%s: entry %x maps to combination %d, which is not in use", step, ik, iv)
		}
		gotIdx[ik] = fmt.Sprint(c.sets)
		uses[iv]++
	}
	// Every combination is counted right, and none outlives its entries.
	for id, c := range r.d.setIdx.combos.byID {
		if c.refs != uses[id] {
			r.t.Fatalf("%s: combination %d %v counts %d entries, the map has %d", step, id, c.sets, c.refs, uses[id])
		}
	}
	if !maps.Equal(gotIdx, wantIdx) {
		r.t.Fatalf("%s: dpd_ipset_idx holds %v, want %v", step, gotIdx, wantIdx)
	}
}

// runProp runs the ops in data: each op is three bytes (op, set, member
// count) followed by that many member bytes.
func runProp(t *testing.T, d *Datapath, opts Options, opened func(*Datapath), data []byte) *propRun {
	r := newPropRun(t, d, opts, opened)
	r.mayFail = opts.Sizes.IPSets < 64
	for i := 0; len(data) >= 3; i++ {
		n := min(int(data[2])%8, len(data)-3)
		r.step(i, data[0], data[1], data[3:3+n])
		data = data[3+n:]
	}
	return r
}

func randomOps(rng *rand.Rand, n int) []byte {
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(rng.UintN(256))
	}
	return data
}

// TestIPSetOpsMatchModel runs random op sequences with roomy maps, where
// every op must succeed, and with maps too small for the sets, where
// writes fail part-way.
func TestIPSetOpsMatchModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
	}{{"roomy", 1024}, {"full", 12}} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{PinDir: testPinDir(t), Sizes: MapSizes{Conntrack: 1024, IPSets: tc.size, IfState: 64,
				RuleCounters: 256, Chain: 64}}
			d := openTest(t, opts)
			opened := func(d *Datapath) { t.Cleanup(func() { _ = d.Close() }) }
			rng := rand.New(rand.NewPCG(7, uint64(tc.size)))
			failed := 0
			for range 8 {
				r := runProp(t, d, opts, opened, randomOps(rng, 400))
				d, failed = r.d, failed+r.failed
			}
			t.Logf("%d ops failed on full maps", failed)
		})
	}
}

// FuzzIPSetOps checks the property on fuzzed op sequences with small maps.
// Under -fuzz, a worker the fuzzer kills cannot remove its pin directory
// (/sys/fs/bpf/dpdtest-<pid>-*); a plain go test runs the seeds only.
func FuzzIPSetOps(f *testing.F) {
	f.Add([]byte{0, 0, 3, 0, 1, 2, 3, 1, 2, 4, 3, 0, 4, 4, 5, 6, 7, 0, 0, 0})
	f.Add([]byte{0, 1, 5, 8, 0, 1, 2, 3, 7, 0, 0, 3, 1, 4, 9, 10, 11, 6, 1, 0})
	f.Add([]byte{2, 2, 7, 13, 14, 15, 16, 10, 11, 12, 5, 2, 2, 14, 10, 7, 3, 0})
	opts := Options{PinDir: testPinDir(f), Sizes: MapSizes{Conntrack: 1024, IPSets: 16, IfState: 64,
		RuleCounters: 256, Chain: 64}}
	d := openTest(f, opts)
	var reopened []*Datapath
	f.Cleanup(func() {
		for _, d := range reopened {
			_ = d.Close()
		}
	})
	opened := func(d *Datapath) { reopened = append(reopened, d) }
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 600 {
			data = data[:600]
		}
		d = runProp(t, d, opts, opened, data).d
	})
}

// TestReadAll: the batched read of a restart sees what one-by-one
// iteration sees, past the first batch.
func TestReadAll(t *testing.T) {
	d := openTest(t, Options{Sizes: MapSizes{Conntrack: 1024, IPSets: 8192, IfState: 64, RuleCounters: 256, Chain: 64}})
	for s := range 3 {
		mustNil(t, d.ReplaceIPSet(memSetName(s), model.IPSetIP, memSetMembersOf(s)))
	}
	sameReads[ipsetKey, uint32](t, d.Maps().IPSets, 3*memSetMembers)
	// The hash takes the first full-length entries it has room for.
	exact := int(exactEntries(8192))
	sameReads[idxKey, idxVal](t, d.IPSetIndexHash(), exact)
	sameReads[idxKey, idxVal](t, d.IPSetIndex(), 3*memSetMembers-exact)
}

func sameReads[K, V comparable](t *testing.T, m *ebpf.Map, want int) {
	t.Helper()
	batched, each := map[K]V{}, map[K]V{}
	mustNil(t, readAll(m, func(k K, v V) { batched[k] = v }))
	mustNil(t, readEach(m, func(k K, v V) { each[k] = v }))
	if len(batched) != want || !maps.Equal(batched, each) {
		t.Fatalf("batched read %d entries, iteration %d, want %d", len(batched), len(each), want)
	}
}
