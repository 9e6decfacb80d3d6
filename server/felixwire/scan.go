package felixwire

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/dpd-dev/dpd/proto/felix"
)

// Field numbers this file reads from raw bytes. They are the same in both
// generations unless noted.
const (
	fieldSeq = 15 // ToDataplane.sequence_number

	payloadPolicyUpdate   = 7
	payloadPolicyRemove   = 8
	payloadHostEPUpdate   = 9
	payloadHostEPRemove   = 10
	payloadWorkloadUpdate = 11
	payloadWorkloadRemove = 12
	payloadHostMetaUpdate = 14
	payloadHostMetaRemove = 18
	payloadRouteUpdate    = 23
	payloadHostMetaV6Up   = 35 // older only
	payloadHostMetaV6Rm   = 36 // older only
	payloadHostMetaV4V6Up = 37 // older only
	payloadHostMetaV4V6Rm = 38 // older only

	policyIDTier = 1 // older PolicyID.tier; reserved since v3.32
	policyIDName = 2
	routeType    = 1 // RouteUpdate.type up to v3.29; reserved since v3.30

	tierIngress = 2 // TierInfo.ingress_policies
	tierEgress  = 3 // TierInfo.egress_policies

	wepUpdateEndpoint = 5 // WorkloadEndpointUpdate.endpoint
	wepTiers          = 7 // WorkloadEndpoint.tiers
	hepUpdateEndpoint = 3 // HostEndpointUpdate.endpoint
)

// HostEndpoint's tier lists: tiers, untracked, pre-DNAT, forward.
var hepTierFields = []protowire.Number{3, 6, 7, 8}

// field is one field of a message as it is on the wire.
type field struct {
	num protowire.Number
	typ protowire.Type
	val []byte // the value: for BytesType its content, else its encoding
	u64 uint64 // VarintType's value
}

// scanBuf is room for a message's fields on the caller's stack: scanning
// runs for every message, and a heap slice per nesting level was a
// measurable share of ingest. Longer messages grow onto the heap.
type scanBuf [16]field

// fields splits b into its fields, failing on malformed wire format.
func fields(b []byte) ([]field, error) { return appendFields(nil, b) }

// appendFields appends the fields of b to out (pass a scanBuf's [:0]).
func appendFields(out []field, b []byte) ([]field, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, fmt.Errorf("field %d: %w", num, protowire.ParseError(m))
			}
			f.val, n = v, m
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return nil, fmt.Errorf("field %d: %w", num, protowire.ParseError(m))
			}
			f.u64, f.val, n = v, b[:m], m
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return nil, fmt.Errorf("field %d: %w", num, protowire.ParseError(m))
			}
			f.val, n = b[:m], m
		}
		b = b[n:]
		out = append(out, f)
	}
	return out, nil
}

// has reports whether fs holds field num.
func has(fs []field, num protowire.Number) bool {
	for _, f := range fs {
		if f.num == num {
			return true
		}
	}
	return false
}

// lastLen returns the content of the last BytesType field num (proto
// merges repeated occurrences of a singular message; the last wins for
// scalars, and for what this file reads that is the same).
func lastLen(fs []field, num protowire.Number) ([]byte, bool) {
	for i := len(fs) - 1; i >= 0; i-- {
		if fs[i].num == num && fs[i].typ == protowire.BytesType {
			return fs[i].val, true
		}
	}
	return nil, false
}

// envelope is what the top level of a ToDataplane says before decoding.
type envelope struct {
	seq     uint64
	payload protowire.Number // 0: none
	body    []byte           // the payload's bytes
}

// scanEnvelope reads the sequence number and the payload (the last oneof
// field, as proto decoding keeps) of a ToDataplane.
func scanEnvelope(b []byte) (envelope, error) {
	var buf scanBuf
	fs, err := appendFields(buf[:0], b)
	if err != nil {
		return envelope{}, err
	}
	var env envelope
	for _, f := range fs {
		switch {
		case f.num == fieldSeq && f.typ == protowire.VarintType:
			env.seq = f.u64
		case f.num != fieldSeq && f.typ == protowire.BytesType:
			env.payload, env.body = f.num, f.val
		}
	}
	return env, nil
}

// Generation is the encoding a message was recognised as.
type Generation uint8

const (
	// Current is the felix package: Calico v3.32 and later.
	Current Generation = iota
	// Legacy is Calico v3.28 to v3.31 (and v3.32.0's host metadata).
	Legacy
)

func (g Generation) String() string {
	if g == Legacy {
		return "legacy"
	}
	return "current"
}

// errMixed: one message holds both encodings of the same thing, which no
// Felix sends.
var errMixed = errors.New("policy references mix the v3.28-v3.31 (names) and v3.32+ (PolicyID) encodings")

// policyIDGen tells the generation of an ActivePolicyUpdate/Remove from
// its PolicyID: only the older one has field 1 (tier, always set by the
// older senders; reserved since). The newer Felix never sends it, so its
// presence decides even though the older bytes decode without error as a
// newer PolicyID that lost its tier.
func policyIDGen(body []byte) (Generation, error) {
	var buf, idBuf scanBuf
	fs, err := appendFields(buf[:0], body)
	if err != nil {
		return Current, err
	}
	id, ok := lastLen(fs, 1)
	if !ok {
		return Current, nil
	}
	idf, err := appendFields(idBuf[:0], id)
	if err != nil {
		return Current, fmt.Errorf("id: %w", err)
	}
	if has(idf, policyIDTier) {
		return Legacy, nil
	}
	return Current, nil
}

// isPolicyIDBytes reports whether a TierInfo policy entry is a current
// PolicyID rather than an older policy name. A PolicyID has a non-empty
// name (field 2) and no field 1, and parses as protobuf; a v1 policy name
// is printable ASCII, and no printable byte encodes the tag of field 2
// (0x12), so no real name passes this test.
func isPolicyIDBytes(e []byte) bool {
	var buf scanBuf
	fs, err := appendFields(buf[:0], e)
	if err != nil || has(fs, 1) {
		return false
	}
	name, ok := lastLen(fs, policyIDName)
	return ok && len(name) > 0 && utf8.Valid(name)
}

// tierListsGen tells the generation of an endpoint's tier lists (the
// fields tierFields of the endpoint message ep). Endpoints without tier
// policies read the same either way and count as current.
func tierListsGen(ep []byte, tierFields []protowire.Number) (Generation, error) {
	var buf, tierBuf scanBuf
	fs, err := appendFields(buf[:0], ep)
	if err != nil {
		return Current, err
	}
	var ids, names int
	for _, f := range fs {
		if f.typ != protowire.BytesType || !slices.Contains(tierFields, f.num) {
			continue
		}
		tfs, err := appendFields(tierBuf[:0], f.val)
		if err != nil {
			return Current, fmt.Errorf("tier: %w", err)
		}
		for _, e := range tfs {
			if e.typ != protowire.BytesType || (e.num != tierIngress && e.num != tierEgress) {
				continue
			}
			if isPolicyIDBytes(e.val) {
				ids++
			} else {
				names++
			}
		}
	}
	switch {
	case ids > 0 && names > 0:
		return Current, errMixed
	case names > 0:
		return Legacy, nil
	}
	return Current, nil
}

// endpointGen tells the generation of a Workload/HostEndpointUpdate body.
func endpointGen(body []byte, epField protowire.Number, tierFields []protowire.Number) (Generation, error) {
	var buf scanBuf
	fs, err := appendFields(buf[:0], body)
	if err != nil {
		return Current, err
	}
	ep, ok := lastLen(fs, epField)
	if !ok {
		return Current, nil
	}
	return tierListsGen(ep, tierFields)
}

// routeGen: only RouteUpdates up to v3.29 have field 1 (type), reserved
// since. An older CIDR_INFO route (type 0) has no field 1 and means the
// same as a current one with no type bits.
func routeGen(body []byte) (Generation, error) {
	var buf scanBuf
	fs, err := appendFields(buf[:0], body)
	if err != nil {
		return Current, err
	}
	if has(fs, routeType) {
		return Legacy, nil
	}
	return Current, nil
}

// workloadIDOf reads the WorkloadEndpointID (field 1) of a
// WorkloadEndpointUpdate/Remove body, the same in both generations, even
// when the rest of the message does not decode. nil when it is absent,
// malformed or incomplete.
func workloadIDOf(body []byte) *felix.WorkloadEndpointID {
	fs, err := fields(body)
	if err != nil {
		// A body cut short may still start with a whole id.
		fs = leadingFields(body)
	}
	idb, ok := lastLen(fs, 1)
	if !ok {
		return nil
	}
	id := &felix.WorkloadEndpointID{}
	idf, err := fields(idb)
	if err != nil {
		return nil
	}
	for _, f := range idf {
		if f.typ != protowire.BytesType || !utf8.Valid(f.val) {
			continue
		}
		switch f.num {
		case 2:
			id.OrchestratorId = string(f.val)
		case 3:
			id.WorkloadId = string(f.val)
		case 4:
			id.EndpointId = string(f.val)
		}
	}
	if id.OrchestratorId == "" || id.WorkloadId == "" || id.EndpointId == "" {
		return nil
	}
	return id
}

// hostEndpointIDOf reads the HostEndpointID's endpoint_id (field 1, then
// 2) of a HostEndpointUpdate/Remove body, the same in both generations,
// even when the rest does not decode. "" when absent or malformed.
func hostEndpointIDOf(body []byte) string {
	fs, err := fields(body)
	if err != nil {
		fs = leadingFields(body)
	}
	idb, ok := lastLen(fs, 1)
	if !ok {
		return ""
	}
	idf, err := fields(idb)
	if err != nil {
		return ""
	}
	v, ok := lastLen(idf, 2)
	if !ok || !utf8.Valid(v) {
		return ""
	}
	return string(v)
}

// leadingFields returns the fields of b up to the first malformed one.
func leadingFields(b []byte) []field {
	var out []field
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return out
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return out
		}
		f := field{num: num, typ: typ, val: b[n : n+m]}
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[n:])
			f.val = v
		}
		out = append(out, f)
		b = b[n+m:]
	}
	return out
}
