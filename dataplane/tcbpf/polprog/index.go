package polprog

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// The indexed strategy classifies a packet once per dimension (a lookup in
// the program's own LPM trie yields a class id) and keeps, per class, a
// bitmap over the program's rules: bit set = the rule's constraint in that
// dimension holds (or the rule has none, or the constraint is only
// partly encoded). The AND of the dimensions' bitmaps is the candidate set;
// the walk visits candidates in rule order and evaluates only what the
// bitmaps do not encode, so first-match order stays exact.

// dimKind is one dimension of the candidate bitmaps.
type dimKind uint8

const (
	dimDport dimKind = iota
	dimSport
	dimSaddr
	dimDaddr
	dimSrcSet // the address sets holding the source (setidx.go)
	dimDstSet // ... the destination
	numDims
)

func (d dimKind) port() bool { return d == dimDport || d == dimSport }
func (d dimKind) set() bool  { return d == dimSrcSet || d == dimDstSet }

// Key of the per-program classification trie (map polCls): prefixlen counts
// the fixed 32 bits of dim, family and pad, then value bits.
const (
	clsKeyPrefixLen = 0
	clsKeyDim       = 4
	clsKeyFamily    = 5
	clsKeyData      = 8
	clsKeySize      = 24
	clsKeyFixedBits = 32
)

// vpfx is a prefix of a dimension's value space: a port (family 0, 16
// bits) or an IPv4/IPv6 address.
type vpfx struct {
	family uint8
	data   [16]byte
	bits   int
}

// contains reports whether q covers e (q is e or shorter and agrees on
// q's bits).
func (q vpfx) contains(e vpfx) bool {
	if q.family != e.family || q.bits > e.bits {
		return false
	}
	full := q.bits / 8
	if !bytes.Equal(q.data[:full], e.data[:full]) {
		return false
	}
	if rem := q.bits % 8; rem > 0 {
		m := byte(0xff << (8 - rem))
		return q.data[full]&m == e.data[full]&m
	}
	return true
}

func netPfx(p netip.Prefix) vpfx {
	p = p.Masked()
	v := vpfx{family: 6, bits: p.Bits()}
	if p.Addr().Is4() {
		v.family = 4
	}
	copy(v.data[:], p.Addr().AsSlice())
	return v
}

// rangePfxs decomposes a port range into aligned prefixes.
func rangePfxs(r model.PortRange) []vpfx {
	var out []vpfx
	lo, hi := uint32(r.First), uint32(r.Last)
	for lo <= hi {
		size := uint32(1)
		for lo%(size*2) == 0 && lo+size*2-1 <= hi && size < 1<<16 {
			size *= 2
		}
		v := vpfx{bits: 16}
		for s := size; s > 1; s /= 2 {
			v.bits--
		}
		binary.BigEndian.PutUint16(v.data[:], uint16(lo))
		out = append(out, v)
		lo += size
	}
	return out
}

// dimCond is one rule's constraint in one dimension, as prefix lists (set
// dimensions: set ids, all of sets and none of notSets).
type dimCond struct {
	pos, neg      []vpfx
	sets, notSets []uint32
	hasPos        bool // a positive list exists (possibly with no prefix: never matches)
	exact         bool // the bitmap encodes it completely: the residual skips it
	ports         bool // port dimension with a constraint: needs a protocol with ports
}

func (c *dimCond) constrained() bool {
	return c.hasPos || len(c.neg) > 0 || c.ports || len(c.notSets) > 0
}

// bit evaluates the constraint for a value whose longest match in the
// trie is e (nil: no entry matched).
func (c *dimCond) bit(e *vpfx) bool {
	if !c.exact {
		return true
	}
	in := func(l []vpfx) bool {
		return e != nil && slices.ContainsFunc(l, func(q vpfx) bool { return q.contains(*e) })
	}
	return (!c.hasPos || in(c.pos)) && !in(c.neg)
}

// ruleCond extracts rule ru's constraint in dimension d.
func (p *plan) ruleCond(ru *model.Rule, d dimKind) dimCond {
	var c dimCond
	switch d {
	case dimSrcSet, dimDstSet:
		c = p.setCond(ru, d)
	case dimDport, dimSport:
		r, nr, n, nn := ru.DstPorts, ru.NotDstPorts, ru.DstNamedPortSets, ru.NotDstNamedPortSets
		if d == dimSport {
			r, nr, n, nn = ru.SrcPorts, ru.NotSrcPorts, ru.SrcNamedPortSets, ru.NotSrcNamedPortSets
		}
		c.ports = len(r)+len(nr)+len(n)+len(nn) > 0
		c.exact = len(n) == 0 && len(nn) == 0
		c.hasPos = len(r) > 0
		for _, x := range r {
			if x.First <= x.Last {
				c.pos = append(c.pos, rangePfxs(x)...)
			}
		}
		for _, x := range nr {
			if x.First <= x.Last {
				c.neg = append(c.neg, rangePfxs(x)...)
			}
		}
	case dimSaddr, dimDaddr:
		p, np := ru.SrcNets, ru.NotSrcNets
		if d == dimDaddr {
			p, np = ru.DstNets, ru.NotDstNets
		}
		c.exact = true
		c.hasPos = len(p) > 0
		for _, x := range p {
			c.pos = append(c.pos, netPfx(x))
		}
		for _, x := range np {
			c.neg = append(c.neg, netPfx(x))
		}
	}
	return c
}

// idxDim is one dimension the program classifies.
type idxDim struct {
	kind    dimKind
	slot    int    // u32 slot of pol_scratch holding the packet's class
	miss    uint32 // class when no trie entry matches
	noPorts uint32 // port dimensions: class of packets without ports
	exact   []bool // by bit: the rule's constraint here is fully encoded
	// hashed: every prefix is full-length (ports, /32, /128), so the
	// longest match is the exact match: classified in mapClsHash.
	hashed bool
	// sd: a set dimension's rule conditions, from which classes are made
	// as combinations of sets appear (setidx.go).
	sd *setDim
}

// clsEntry is one entry of the classification trie.
type clsEntry struct {
	key   [clsKeySize]byte
	class uint32
	// exact: the entry's dimension has only full-length prefixes, so it
	// goes into the exact-match table (a hash lookup costs less than the
	// trie's).
	exact bool
}

// index is the indexed strategy's per-program data.
type index struct {
	bitOf   []int  // by block: its bit, -1 for blocks without one
	blockOf []int  // by bit: its block
	words   int    // u64 words per bitmap
	reload  []bool // by block: loads the word registers on entry
	dims    []idxDim
	classes [][]uint64 // by class id
	classOf map[string]uint32
	entries []clsEntry // sorted by key
	// start is the first block with a bit. Blocks before it (the linear
	// head) run unconditionally; the packet is classified at start.
	start int
}

// linearHeadEnd is the block after the first n rules that run before the
// index: the head ends early at a rule with a set test (a lookup each
// would cost more than the classification) or a Pass action (its target
// must see the packet classified).
func (p *plan) linearHeadEnd(n int) int {
	rules := 0
	for i := range p.blocks {
		b := &p.blocks[i]
		if b.kind == blockNoMatch {
			return i
		}
		if b.kind != blockRule || !b.emitsCode() {
			continue
		}
		ru := b.rule
		if rules == n || b.action == model.ActionPass || len(ru.SrcIPSets)+len(ru.DstIPSets)+len(ru.NotSrcIPSets)+
			len(ru.NotDstIPSets)+len(ru.SrcNamedPortSets)+len(ru.DstNamedPortSets)+len(ru.NotSrcNamedPortSets)+
			len(ru.NotDstNamedPortSets)+len(ru.DstIPPortSets) > 0 {
			return i
		}
		rules++
	}
	return len(p.blocks)
}

// Thresholds of the automatic strategy choice.
const (
	// indexMinRules: below this many rules a linear scan is cheaper than
	// the lookups.
	indexMinRules = 48
	// dimMinRules: a dimension is classified when at least this many rules
	// constrain it; fewer are checked in the rules' own code.
	dimMinRules = 16
)

// newIndex builds the index of plan p, or returns nil when the strategy
// does not apply (too few rules, no dimension worth classifying). A
// policy with too few rules for the other dimensions still classifies its
// address sets when it tests more than one (one lookup per address then
// answers every set test).
func newIndex(p *plan, opts Options) *index {
	s, head := opts.Strategy, linearHead(opts)
	if s == StrategyLinear {
		return nil
	}
	ix := &index{bitOf: make([]int, len(p.blocks)), classOf: map[string]uint32{}}
	ix.start = p.linearHeadEnd(head)
	for i := range p.blocks {
		ix.bitOf[i] = -1
		if b := &p.blocks[i]; i >= ix.start && b.kind == blockRule && b.emitsCode() {
			ix.bitOf[i] = len(ix.blockOf)
			ix.blockOf = append(ix.blockOf, i)
		}
	}
	nbits := len(ix.blockOf)
	if nbits == 0 {
		return nil
	}
	ix.start = ix.blockOf[0]
	minDim, minSetDim := dimMinRules, minSetFacts
	if s == StrategyIndexed {
		minDim, minSetDim = 1, 1
	} else if nbits < indexMinRules {
		minDim = nbits + 1 // sets only
	}
	ix.words = (nbits + 63) / 64
	conds := make([][]dimCond, numDims)
	for d := range numDims {
		if d.set() && opts.NoIPSetIndex {
			continue
		}
		conds[d] = make([]dimCond, nbits)
		n := 0
		for bit, bi := range ix.blockOf {
			conds[d][bit] = p.ruleCond(p.blocks[bi].rule, d)
			if conds[d][bit].constrained() && conds[d][bit].exact {
				n++
			}
		}
		switch {
		case d.set() && n >= minSetDim:
			ix.addSetDim(d, conds[d])
		case !d.set() && n >= minDim && n > 0:
			ix.addDim(d, conds[d])
		}
	}
	if len(ix.dims) == 0 {
		return nil
	}
	slices.SortFunc(ix.entries, func(a, b clsEntry) int { return bytes.Compare(a.key[:], b.key[:]) })
	return ix
}

// addDim classifies dimension d: one trie entry per distinct prefix of
// the rules' constraints, each with the class of the bitmap it implies.
// The prefixes containing a value form a chain, so the longest match e
// decides every rule: a rule's prefix contains the value iff it contains e.
func (ix *index) addDim(d dimKind, conds []dimCond) {
	dim := idxDim{kind: d, slot: len(ix.dims), exact: make([]bool, len(conds))}
	for bit := range conds {
		dim.exact[bit] = conds[bit].exact
	}
	miss := make([]uint64, ix.words)
	for bit := range conds {
		if conds[bit].bit(nil) {
			miss[bit/64] |= 1 << (bit % 64)
		}
	}
	dim.miss = ix.class(miss)
	if d.port() {
		np := make([]uint64, ix.words)
		for bit := range conds {
			if !conds[bit].ports {
				np[bit/64] |= 1 << (bit % 64)
			}
		}
		dim.noPorts = ix.class(np)
	}
	// Which rules each prefix appears in, positively or negated.
	type use struct {
		bit int
		neg bool
	}
	uses := map[vpfx][]use{}
	var pfxs []vpfx
	lengths := map[uint8]map[int]bool{} // by family: prefix lengths in use
	for bit := range conds {
		if !conds[bit].exact {
			continue
		}
		for neg, l := range [][]vpfx{conds[bit].pos, conds[bit].neg} {
			for _, q := range l {
				if _, ok := uses[q]; !ok {
					pfxs = append(pfxs, q)
					if lengths[q.family] == nil {
						lengths[q.family] = map[int]bool{}
					}
					lengths[q.family][q.bits] = true
				}
				uses[q] = append(uses[q], use{bit, neg == 1})
			}
		}
	}
	dim.hashed = len(pfxs) > 0
	for _, q := range pfxs {
		full := 128
		switch q.family {
		case 0:
			full = 16
		case 4:
			full = 32
		}
		dim.hashed = dim.hashed && q.bits == full
	}
	posHit, negHit := make([]bool, len(conds)), make([]bool, len(conds))
	for _, e := range pfxs {
		var touched []int
		for l := range lengths[e.family] {
			if l > e.bits {
				continue
			}
			for _, u := range uses[e.truncate(l)] {
				if u.neg {
					negHit[u.bit] = true
				} else {
					posHit[u.bit] = true
				}
				touched = append(touched, u.bit)
			}
		}
		bm := slices.Clone(miss)
		for _, bit := range touched {
			c := &conds[bit]
			if (!c.hasPos || posHit[bit]) && !negHit[bit] {
				bm[bit/64] |= 1 << (bit % 64)
			} else {
				bm[bit/64] &^= 1 << (bit % 64)
			}
		}
		for _, bit := range touched {
			posHit[bit], negHit[bit] = false, false
		}
		var ent clsEntry
		binary.NativeEndian.PutUint32(ent.key[clsKeyPrefixLen:], uint32(clsKeyFixedBits+e.bits))
		ent.key[clsKeyDim] = byte(d)
		ent.key[clsKeyFamily] = e.family
		copy(ent.key[clsKeyData:], e.data[:])
		ent.class = ix.class(bm)
		ent.exact = dim.hashed
		ix.entries = append(ix.entries, ent)
	}
	ix.dims = append(ix.dims, dim)
}

// class returns the id of bitmap bm, adding it if new: identical bitmaps
// share a class, across dimensions too.
func (ix *index) class(bm []uint64) uint32 {
	k := bitmapKey(bm)
	if id, ok := ix.classOf[k]; ok {
		return id
	}
	id := uint32(len(ix.classes))
	ix.classes = append(ix.classes, bm)
	ix.classOf[k] = id
	return id
}

// truncate masks v to its first l bits.
func (v vpfx) truncate(l int) vpfx {
	out := vpfx{family: v.family, bits: l}
	copy(out.data[:l/8], v.data[:l/8])
	if rem := l % 8; rem > 0 {
		out.data[l/8] = v.data[l/8] & byte(0xff<<(8-rem))
	}
	return out
}

func bitmapKey(bm []uint64) string {
	b := make([]byte, 0, 8*len(bm))
	for _, w := range bm {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return string(b)
}

// encoded reports whether block i's constraint in dimension d is fully
// decided by the bitmaps.
func (ix *index) encoded(i int, d dimKind) bool {
	if ix == nil || ix.bitOf[i] < 0 {
		return false
	}
	for _, dim := range ix.dims {
		if dim.kind == d {
			return dim.exact[ix.bitOf[i]]
		}
	}
	return false
}

// groupStart reports whether block i starts a word's group: the block of
// its first bit (block 0 starts the first group, which holds the linear
// head when there is one).
func (ix *index) groupStart(i int) bool {
	if i == 0 {
		return true
	}
	b := ix.bitOf[i]
	return b >= 0 && b%64 == 0
}
