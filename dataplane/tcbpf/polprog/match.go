package polprog

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// needs records which per-chunk resources a block's code uses.
type needs struct {
	srcKey, dstKey bool // lookup key templates on the stack
	ipsets, ctrs   bool // map references
	walk           bool // indexed strategy: bitmap pointers on the stack
}

func (n *needs) merge(o needs) {
	n.srcKey = n.srcKey || o.srcKey
	n.dstKey = n.dstKey || o.dstKey
	n.ipsets = n.ipsets || o.ipsets
	n.ctrs = n.ctrs || o.ctrs
	n.walk = n.walk || o.walk
}

// gen emits the code of one block. Every jump that leaves the block goes to
// a block label ("b<N>") or the chunk epilogue; local labels are "b<N>.<k>".
type gen struct {
	s     stream
	p     *plan
	pfx   string
	n     int
	needs needs
	blk   int // the block being compiled, under the indexed strategy; else -1
}

// encoded reports whether the current block's constraint in dimension d is
// decided by the candidate bitmaps (the block only runs when it holds).
func (g *gen) encoded(d dimKind) bool {
	return g.blk >= 0 && g.p.idx.encoded(g.blk, d)
}

func (g *gen) local() string {
	g.n++
	return fmt.Sprintf("%s.%d", g.pfx, g.n)
}

func blockLabel(i int) string { return fmt.Sprintf("b%d", i) }

// matches emits the rule's conditions: it falls through when the packet
// matches and jumps to fail otherwise. Cheap field tests come first so the
// set lookups only run for packets that pass them.
func (g *gen) matches(ru *model.Rule, fail string) {
	s := &g.s
	g.family(ru, fail) // ip_version, and the families its CIDR lists leave
	if ru.Protocol != nil {
		s.emit(ldState(asm.R1, abi.StateProto, asm.Byte), asm.JNE.Imm(asm.R1, int32(*ru.Protocol), fail))
	}
	if ru.NotProtocol != nil {
		s.emit(ldState(asm.R1, abi.StateProto, asm.Byte), asm.JEq.Imm(asm.R1, int32(*ru.NotProtocol), fail))
	}
	if ru.ICMP != nil {
		g.icmp(*ru.ICMP, false, fail)
	}
	if ru.NotICMP != nil {
		g.icmp(*ru.NotICMP, true, fail)
	}
	protoChecked := false
	ports := func(off int, kind keyKind, ranges []model.PortRange, sets []string, negate bool) {
		if len(ranges) == 0 && len(sets) == 0 {
			return
		}
		if !protoChecked {
			g.portProto(ru, fail)
			protoChecked = true
		}
		g.negatable(negate, fail, func(yes, no string) { g.ports(off, kind, ranges, sets, yes, no) })
	}
	if !g.encoded(dimSport) {
		ports(abi.StateSport, keySrcPort, ru.SrcPorts, ru.SrcNamedPortSets, false)
		ports(abi.StateSport, keySrcPort, ru.NotSrcPorts, ru.NotSrcNamedPortSets, true)
	}
	if !g.encoded(dimDport) {
		ports(abi.StateDport, keyDstPort, ru.DstPorts, ru.DstNamedPortSets, false)
		ports(abi.StateDport, keyDstPort, ru.NotDstPorts, ru.NotDstNamedPortSets, true)
	}
	nets := func(off int, list []netip.Prefix, negate bool) {
		if len(list) > 0 {
			g.negatable(negate, fail, func(yes, no string) { g.nets(off, list, yes, no) })
		}
	}
	if !g.encoded(dimSaddr) {
		nets(abi.StateSaddr, ru.SrcNets, false)
		nets(abi.StateSaddr, ru.NotSrcNets, true)
	}
	if !g.encoded(dimDaddr) {
		nets(abi.StateDaddr, ru.DstNets, false)
		nets(abi.StateDaddr, ru.NotDstNets, true)
	}
	if !g.encoded(dimSrcSet) {
		g.allSets(ru.SrcIPSets, keySrcAddr, fail)
		g.noSets(ru.NotSrcIPSets, keySrcAddr, fail)
	}
	if !g.encoded(dimDstSet) {
		g.allSets(ru.DstIPSets, keyDstAddr, fail)
		g.noSets(ru.NotDstIPSets, keyDstAddr, fail)
	}
	if len(ru.DstIPPortSets) > 0 {
		g.negatable(false, fail, func(yes, no string) { g.anySet(ru.DstIPPortSets, keyDstPort, yes, no) })
	}
}

// negatable runs an "any of" emitter: for a positive match, yes continues
// and no fails; negated, the other way round. The emitter must end with a
// jump to yes or no.
func (g *gen) negatable(negate bool, fail string, emit func(yes, no string)) {
	cont := g.local()
	if negate {
		emit(fail, cont)
	} else {
		emit(cont, fail)
	}
	g.s.label(cont)
}

// portProto fails packets of protocols without ports.
func (g *gen) portProto(ru *model.Rule, fail string) {
	if ru.Protocol != nil {
		if !slices.Contains(portProtos, *ru.Protocol) {
			g.s.emit(asm.Ja.Label(fail))
		}
		return // the protocol match already decided
	}
	ok := g.local()
	g.s.emit(ldState(asm.R1, abi.StateProto, asm.Byte))
	for _, p := range portProtos {
		g.s.emit(asm.JEq.Imm(asm.R1, int32(p), ok))
	}
	g.s.emit(asm.Ja.Label(fail))
	g.s.label(ok)
}

// ports jumps to yes when the port at off is in any range or the packet is
// in any of the named-port sets, else to no.
func (g *gen) ports(off int, kind keyKind, ranges []model.PortRange, sets []string, yes, no string) {
	s := &g.s
	if len(ranges) > 0 {
		s.emit(ldState(asm.R1, off, asm.Half))
	}
	for _, r := range ranges {
		switch {
		case r.First > r.Last:
			continue // empty range
		case r.First == 0 && r.Last == 0xffff:
			s.emit(asm.Ja.Label(yes))
			return
		case r.First == r.Last:
			s.emit(asm.JEq.Imm(asm.R1, int32(r.First), yes))
		default:
			next := g.local()
			if r.First > 0 {
				s.emit(asm.JLT.Imm(asm.R1, int32(r.First), next))
			}
			s.emit(asm.JLE.Imm(asm.R1, int32(r.Last), yes))
			s.label(next)
		}
	}
	g.anySet(sets, kind, yes, no)
}

// icmp matches an ICMP type (and code). Negated, non-ICMP packets match.
func (g *gen) icmp(m model.ICMPMatch, negate bool, fail string) {
	s := &g.s
	check, cont := g.local(), g.local()
	if negate {
		g.isICMP(check, cont)
	} else {
		g.isICMP(check, fail)
	}
	s.label(check)
	miss := fail
	if negate {
		miss = cont
	}
	s.emit(ldState(asm.R1, abi.StateICMPType, asm.Byte), asm.JNE.Imm(asm.R1, int32(m.Type), miss))
	if m.HasCode {
		s.emit(ldState(asm.R1, abi.StateICMPCode, asm.Byte), asm.JNE.Imm(asm.R1, int32(m.Code), miss))
	}
	if negate {
		s.emit(asm.Ja.Label(fail))
	}
	s.label(cont)
}

// isICMP jumps to yes for ICMP over IPv4 and ICMPv6 over IPv6, else to no.
func (g *gen) isICMP(yes, no string) {
	v4 := g.local()
	g.s.emit(
		ldState(asm.R1, abi.StateProto, asm.Byte),
		ldState(asm.R2, abi.StateFamily, asm.Byte),
		asm.JEq.Imm(asm.R1, model.ProtoICMP, v4),
		asm.JNE.Imm(asm.R1, model.ProtoICMPv6, no),
		asm.JEq.Imm(asm.R2, 6, yes),
		asm.Ja.Label(no),
	)
	g.s.label(v4)
	g.s.emit(asm.JEq.Imm(asm.R2, 4, yes), asm.Ja.Label(no))
}

// nets jumps to yes when the address at off is in any prefix (of the
// packet's family), else to no. Words are compared in native byte order,
// exactly as they sit in dpd_state.
func (g *gen) nets(off int, list []netip.Prefix, yes, no string) {
	s := &g.s
	var v4, v6 []netip.Prefix
	for _, p := range list {
		if p.Addr().Is4() {
			v4 = append(v4, p.Masked())
		} else {
			v6 = append(v6, p.Masked())
		}
	}
	s.emit(ldState(asm.R1, abi.StateFamily, asm.Byte))
	not4 := no
	if len(v6) > 0 {
		not4 = g.local()
	}
	if len(v4) > 0 {
		s.emit(asm.JNE.Imm(asm.R1, 4, not4), ldState(asm.R2, off, asm.Word))
		g.prefixes(off, v4, yes)
		s.emit(asm.Ja.Label(no))
	}
	if len(v6) > 0 {
		s.label(not4)
		s.emit(asm.JNE.Imm(asm.R1, 6, no))
		g.prefixes(off, v6, yes)
		s.emit(asm.Ja.Label(no))
	}
	if len(v4) == 0 && len(v6) == 0 {
		s.emit(asm.Ja.Label(no))
	}
}

// prefixes emits one test per prefix, jumping to yes on a hit and falling
// through after the last miss. For IPv4, R2 already holds the address.
func (g *gen) prefixes(off int, list []netip.Prefix, yes string) {
	s := &g.s
	for _, p := range list {
		addr := p.Addr().AsSlice()
		bits := p.Bits()
		if p.Addr().Is4() {
			net, mask := words(addr, bits, 0)
			switch bits {
			case 0:
				s.emit(asm.Ja.Label(yes))
				return
			case 32:
				s.emit(asm.JEq.Imm32(asm.R2, int32(net), yes))
			default:
				s.emit(asm.Mov.Reg32(asm.R3, asm.R2), asm.And.Imm32(asm.R3, int32(mask)),
					asm.JEq.Imm32(asm.R3, int32(net), yes))
			}
			continue
		}
		if bits == 0 {
			s.emit(asm.Ja.Label(yes))
			return
		}
		next := g.local()
		for w := 0; w < 4 && bits > 32*w; w++ {
			net, mask := words(addr, bits, w)
			s.emit(ldState(asm.R2, off+4*w, asm.Word))
			if mask != 0xffffffff {
				s.emit(asm.And.Imm32(asm.R2, int32(mask)))
			}
			s.emit(asm.JNE.Imm32(asm.R2, int32(net), next))
		}
		s.emit(asm.Ja.Label(yes))
		s.label(next)
	}
}

// words returns 32-bit word w of a masked address and of its prefix mask,
// in native byte order (the order a 4-byte load from dpd_state yields).
func words(addr []byte, bits, w int) (net, mask uint32) {
	var m [4]byte
	for i := range 4 {
		b := bits - 32*w - 8*i
		switch {
		case b >= 8:
			m[i] = 0xff
		case b > 0:
			m[i] = byte(0xff << (8 - b))
		}
	}
	mask = binary.NativeEndian.Uint32(m[:])
	return binary.NativeEndian.Uint32(addr[4*w:4*w+4]) & mask, mask
}
