package tcbpf

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// TestBTFLayout checks the structs of the compiled object against abi.go,
// so the policy compiler's offsets cannot drift from the C layout.
func TestBTFLayout(t *testing.T) {
	spec, err := bpf.LoadDpd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		size    uint32
		members map[string]uint32 // byte offsets
	}{
		{"dpd_state", abi.StateSize, map[string]uint32{
			"saddr": abi.StateSaddr, "daddr": abi.StateDaddr, "sport": abi.StateSport, "dport": abi.StateDport,
			"proto": abi.StateProto, "family": abi.StateFamily, "icmp_type": abi.StateICMPType,
			"icmp_code": abi.StateICMPCode, "ifindex": abi.StateIfindex, "dir": abi.StateDir,
			"verdict": abi.StateVerdict, "chain_pos": abi.StateChainPos, "rule_id": abi.StateRuleID,
			"pol_scratch": abi.StatePolScratch, "pkt_len": abi.StatePktLen, "flags": abi.StateFlags,
			"trace": abi.StateTrace, "nat_addr": abi.StateNATAddr, "nat_port": abi.StateNATPort,
			"nat_svc": abi.StateNATSvc, "dst_route": abi.StateDstRoute,
		}},
		{"dpd_ipset_key", abi.IPSetKeySize, map[string]uint32{
			"prefixlen": abi.IPSetKeyPrefixLen, "set_id": abi.IPSetKeySetID, "proto": abi.IPSetKeyProto, "family": abi.IPSetKeyFamily,
			"port": abi.IPSetKeyPort, "addr": abi.IPSetKeyAddr,
		}},
		{"dpd_ct_key", abi.CTKeySize, map[string]uint32{
			"saddr": abi.CTKeySaddr, "daddr": abi.CTKeyDaddr, "sport": abi.CTKeySport, "dport": abi.CTKeyDport,
			"proto": abi.CTKeyProto, "dir": abi.CTKeyDir, "family": abi.CTKeyFamily, "ifindex": abi.CTKeyIfindex,
		}},
		{"dpd_ct_val", abi.CTValSize, map[string]uint32{
			"created": abi.CTValCreated, "last_seen": abi.CTValLastSeen, "flags": abi.CTValFlags,
			"nat_addr": abi.CTValNATAddr, "nat_port": abi.CTValNATPort, "nat_svc": abi.CTValNATSvc,
			"rule_id": abi.CTValRuleID, "pkts_fwd": abi.CTValPktsFwd, "bytes_fwd": abi.CTValBytesFwd,
			"pkts_rev": abi.CTValPktsRev, "bytes_rev": abi.CTValBytesRev,
		}},
		{"dpd_nat_fe_key", abi.NATFrontendKeySize, map[string]uint32{"addr": 0, "port": 16, "proto": 18, "family": 19}},
		{"dpd_nat_fe_val", abi.NATFrontendValSize, map[string]uint32{"svc_id": 0, "count": 4, "flags": 8}},
		{"dpd_nat_fe_bits", abi.NATFEBits / 8, map[string]uint32{"bits": 0}},
		{"dpd_nat_be_key", abi.NATBackendKeySize, map[string]uint32{"svc_id": 0, "ordinal": 4}},
		{"dpd_nat_be_val", abi.NATBackendValSize, map[string]uint32{"addr": 0, "port": 16, "flags": 20}},
		{"dpd_route_key", abi.RouteKeySize, map[string]uint32{"prefixlen": 0, "family": 4, "addr": 8}},
		{"dpd_route_val", abi.RouteValSize, map[string]uint32{"flags": 0, "pool_type": 4, "next_hop": 8}},
		{"dpd_counter", abi.CounterSize, map[string]uint32{"packets": 0, "bytes": 8}},
		{"dpd_ipset_name", abi.IPSetNameLen, map[string]uint32{"name": 0}},
		{"dpd_frag_key", abi.FragKeySize, map[string]uint32{
			"saddr": abi.FragKeySaddr, "daddr": abi.FragKeyDaddr, "id": abi.FragKeyID, "proto": abi.FragKeyProto,
			"family": abi.FragKeyFamily, "dir": abi.FragKeyDir, "ifindex": abi.FragKeyIfindex,
		}},
		{"dpd_frag_val", abi.FragValSize, map[string]uint32{
			"seen": abi.FragValSeen, "sport": abi.FragValSport, "dport": abi.FragValDport,
			"icmp_type": abi.FragValICMPType, "icmp_code": abi.FragValICMPCode, "proto": abi.FragValProto,
		}},
		{"dpd_flow_event", abi.FlowEventLen, map[string]uint32{
			"ts_ns": abi.EvTsNs, "rule_id": abi.EvRuleID, "saddr": abi.EvSaddr, "daddr": abi.EvDaddr,
			"sport": abi.EvSport, "dport": abi.EvDport, "proto": abi.EvProto, "family": abi.EvFamily,
			"dir": abi.EvDir, "verdict": abi.EvVerdict, "ifindex": abi.EvIfindex, "flags": abi.EvFlags,
			"suppressed": abi.EvSuppressed, "pkt_len": abi.EvPktLen, "nat_addr": abi.EvNATAddr,
			"nat_port": abi.EvNATPort, "kind": abi.EvKind, "icmp_type": abi.EvICMPType,
			"nat_svc": abi.EvNATSvc, "icmp_code": abi.EvICMPCode,
			"preview_verdict": abi.EvPreviewVerdict, "preview_rule_id": abi.EvPreviewRuleID,
		}},
		{"dpd_hep_cfg", abi.HepCfgSize, map[string]uint32{"to_host": 0, "to_host_slot": 4}},
		{"dpd_ifstate", 8, map[string]uint32{"slot": 0, "flags": 4}},
		{"dpd_clock", abi.ClockSize, map[string]uint32{"tick_ns": 0, "offset_ns": 8, "sample_jiffies": 16, "sample_ns": 24}},
		{"dpd_hep_stages", abi.HepStagesSize, map[string]uint32{"untracked": 0, "prednat": 4}},
		{"dpd_failsafe_key", abi.FailsafeKeySize, map[string]uint32{
			"prefixlen": abi.FailsafeKeyPrefixlen, "port": abi.FailsafeKeyPort, "proto": abi.FailsafeKeyProto,
			"flags": abi.FailsafeKeyFlags, "addr": abi.FailsafeKeyAddr,
		}},
		{"dpd_failsafe6_key", abi.FailsafeKey6Size, map[string]uint32{
			"prefixlen": abi.FailsafeKeyPrefixlen, "port": abi.FailsafeKeyPort, "proto": abi.FailsafeKeyProto,
			"flags": abi.FailsafeKeyFlags, "addr": abi.FailsafeKeyAddr,
		}},
		{"dpd_preview_st", abi.PreviewStSize, map[string]uint32{"rule_id": 0, "verdict": 8}},
		{"dpd_ev_cfg", abi.EvCfgSize, map[string]uint32{"flags": 0, "deny_mask": 4, "deny_interval_ns": 8}},
		{"dpd_ev_deny", abi.EvDenySize, map[string]uint32{"key": 0, "last_ns": 48, "count": 56}},
		{"dpd_fwd_cfg", abi.FwdCfgSize, map[string]uint32{"flags": 0}},
		{"dpd_fwd_cache_ent", abi.FwdCacheEntSize, map[string]uint32{
			"saddr": 0, "daddr": 16, "ifindex": 32, "oif": 36, "macs": 40, "family": 52, "expires": 56,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s *btf.Struct
			if err := spec.Types.TypeByName(tc.name, &s); err != nil {
				t.Fatalf("struct %s not in BTF: %v", tc.name, err)
			}
			if s.Size != tc.size {
				t.Errorf("sizeof %s = %d, abi says %d", tc.name, s.Size, tc.size)
			}
			seen := map[string]bool{}
			for _, m := range s.Members {
				seen[m.Name] = true
				want, ok := tc.members[m.Name]
				if !ok {
					continue // padding fields have no abi constant
				}
				if got := m.Offset.Bytes(); got != want {
					t.Errorf("%s.%s at %d, abi says %d", tc.name, m.Name, got, want)
				}
			}
			for name := range tc.members {
				if !seen[name] {
					t.Errorf("%s has no member %s", tc.name, name)
				}
			}
		})
	}
}

// TestHeaderDefines checks every #define of dpd_abi.h against abi.go.
func TestHeaderDefines(t *testing.T) {
	goVals := map[string]int64{
		"DPD_DIR_FROM_WEP": abi.DirFromWEP, "DPD_DIR_TO_WEP": abi.DirToWEP,
		"DPD_VERDICT_NONE": abi.VerdictNone, "DPD_VERDICT_ALLOW": abi.VerdictAllow, "DPD_VERDICT_DENY": abi.VerdictDeny,
		"DPD_JUMP_EPILOGUE": abi.JumpEpilogue, "DPD_JUMP_POL_BASE": abi.JumpPolBase,
		"DPD_IF_READY": abi.IfReady, "DPD_IF_WORKLOAD": abi.IfWorkload,
		"DPD_TRACE_MARK": abi.TraceMark,
		"DPD_ST_TCP_SYN": abi.StTCPSyn, "DPD_ST_TCP_ACK": abi.StTCPAck, "DPD_ST_TCP_FIN": abi.StTCPFin,
		"DPD_ST_TCP_RST": abi.StTCPRst, "DPD_ST_FRAGMENT": abi.StFragment, "DPD_ST_CT_FWD": abi.StCTFwd,
		"DPD_ST_CT_REV": abi.StCTRev, "DPD_ST_NO_POLICY": abi.StNoPolicy, "DPD_ST_EPILOGUE": abi.StEpilogue,
		"DPD_ST_CT_RELATED":    abi.StCTRelated,
		"DPD_CT_F_ESTABLISHED": abi.CTFEstablished, "DPD_CT_F_CLOSING": abi.CTFClosing,
		"DPD_CT_F_FIN_ORIG": abi.CTFFinOrig, "DPD_CT_F_FIN_REPLY": abi.CTFFinReply,
		"DPD_CT_TIMEOUT_TCP_CLOSED_S": abi.CTTimeoutTCPClosedS,
		"DPD_CT_F_ORIG_HI":            abi.CTFOrigHi, "DPD_CT_CFG_LEGACY": abi.CTCfgLegacy, "DPD_CT_CFG_WRITE_LEGACY": abi.CTCfgWriteLegacy,
		"DPD_CT_CFG_LRU": abi.CTCfgLRU, "DPD_CT_CFG_WRITE_LRU": abi.CTCfgWriteLRU,
		"DPD_CT_TIMEOUT_TCP_EST_S": abi.CTTimeoutTCPEstS, "DPD_CT_TIMEOUT_TCP_OTHER_S": abi.CTTimeoutTCPOtherS,
		"DPD_CT_TIMEOUT_UDP_S": abi.CTTimeoutUDPS, "DPD_CT_TIMEOUT_ICMP_S": abi.CTTimeoutICMPS,
		"DPD_CT_TIMEOUT_OTHER_S": abi.CTTimeoutOtherS, "DPD_CT_REFRESH_NS": abi.CTRefreshNS,
		"DPD_IPSET_NAME_LEN": abi.IPSetNameLen,
		"DPD_DIR_NAT":        abi.DirNAT, "DPD_CT_F_NAT_FWD": abi.CTFNATFwd, "DPD_CT_F_HAIRPIN": abi.CTFHairpin,
		"DPD_HAIRPIN_ADDR": abi.HairpinAddr, "DPD_ST_NAT": abi.StNAT, "DPD_ST_HAIRPIN": abi.StHairpin,
		"DPD_ST_NO_BACKEND": abi.StNoBackend, "DPD_ROUTE_KEY_FIXED_BITS": abi.RouteKeyFixedBits,
		"DPD_RT_REMOTE_WORKLOAD": abi.RTRemoteWorkload, "DPD_RT_REMOTE_HOST": abi.RTRemoteHost,
		"DPD_RT_LOCAL_WORKLOAD": abi.RTLocalWorkload, "DPD_RT_LOCAL_HOST": abi.RTLocalHost,
		"DPD_RT_REMOTE_TUNNEL": abi.RTRemoteTunnel, "DPD_RT_LOCAL_TUNNEL": abi.RTLocalTunnel,
		"DPD_RT_IN_POOL": abi.RTInPool, "DPD_RT_NAT_OUTGOING": abi.RTNATOutgoing,
		"DPD_RT_SAME_SUBNET": abi.RTSameSubnet, "DPD_RT_TUNNEL_VXLAN": abi.RTTunnelVXLAN,
		"DPD_NAT_FE_BITS": abi.NATFEBits, "DPD_NAT_FE_HASH_MUL": abi.NATFEHashMul,
		"DPD_NAT_FE_HASH_SHIFT": abi.NATFEHashShift,
		"DPD_FRAG_TIMEOUT_S":    abi.FragTimeoutS, "DPD_DROP_FRAG_NO_FIRST": abi.DropFragNoFirst,
		"DPD_DROP_FRAG_TINY": abi.DropFragTiny, "DPD_DROP_IPV6_EXT": abi.DropIPv6Ext, "DPD_DROP_CT_FULL": abi.DropCTFull, "DPD_DROP_MAX": abi.DropMax,
		"DPD_ST_UNPOLICED": abi.StUnpoliced,
		"DPD_CT_FAMILY_V4": abi.CTFamilyV4, "DPD_CT_FAMILY_V6": abi.CTFamilyV6, "DPD_ST_ICMP6_ND": abi.StICMP6ND,
		"DPD_NAT_BE_F_V6":     abi.NATBeFV6,
		"DPD_HAIRPIN_ADDR6_0": int64(abi.HairpinAddr6[0]), "DPD_HAIRPIN_ADDR6_1": int64(abi.HairpinAddr6[1]),
		"DPD_HAIRPIN_ADDR6_2": int64(abi.HairpinAddr6[2]), "DPD_HAIRPIN_ADDR6_3": int64(abi.HairpinAddr6[3]),
		"DPD_EV_DECIDED": abi.EvDecided, "DPD_EV_NO_POLICY": abi.EvNoPolicy, "DPD_EV_CFG_ON": abi.EvCfgOn,
		"DPD_IF_HOST": abi.IfHost, "DPD_IF_FWD_SHIFT": abi.IfFwdShift, "DPD_ST_FAILSAFE": abi.StFailsafe, "DPD_FS_KEY_FIXED_BITS": abi.FSKeyFixedBits,
		"DPD_FS_INBOUND": abi.FSInbound, "DPD_FS_OUTBOUND": abi.FSOutbound,
		"DPD_ST_HEP_UNTRACKED": abi.StHepUntracked, "DPD_CT_F_FAILSAFE": abi.CTFFailsafe,
		"DPD_TO_HOST_ACCEPT": abi.ToHostAccept, "DPD_TO_HOST_DROP": abi.ToHostDrop, "DPD_TO_HOST_RETURN": abi.ToHostReturn, "DPD_ST_HEP_TOHOST": abi.StHepToHost, "DPD_ST_HEP_PREDNAT": abi.StHepPreDNAT,
		"DPD_JUMP_HEP_CONT_FROM_WEP": abi.JumpHepContFromWEP, "DPD_JUMP_HEP_CONT_TO_WEP": abi.JumpHepContToWEP,
		"DPD_EV_CFG_PREVIEW": abi.EvCfgPreview, "DPD_ST_PREVIEW": abi.StPreview,
		"DPD_IFSTATE_ARR_ENTRIES": abi.IfStateArrEntries, "DPD_FWD_CFG_STACK": abi.FwdCfgStack,
		"DPD_FWD_CFG_NO_PEER": abi.FwdCfgNoPeer,
		"DPD_FWD_CACHE_BITS":  abi.FwdCacheBits, "DPD_FWD_CACHE_ENTRIES": abi.FwdCacheEntries, "DPD_FWD_CACHE_NS": abi.FwdCacheNS,
	}
	f, err := os.Open("../../bpf/include/dpd_abi.h")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	re := regexp.MustCompile(`^#define\s+(DPD_\w+)\s+(.+?)\s*(/\*.*)?$`)
	shift := regexp.MustCompile(`^\(1u << (\d+)\)$`)
	found := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := re.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil || m[1] == "DPD_ABI_H" {
			continue
		}
		name, expr := m[1], m[2]
		var v int64
		if s := shift.FindStringSubmatch(expr); s != nil {
			n, _ := strconv.Atoi(s[1])
			v = 1 << n
		} else if v, err = strconv.ParseInt(expr, 0, 64); err != nil {
			t.Errorf("%s: cannot read value %q", name, expr)
			continue
		}
		found[name] = true
		want, ok := goVals[name]
		if !ok {
			t.Errorf("%s = %d has no abi.go mirror in this test", name, v)
			continue
		}
		if want != v {
			t.Errorf("%s = %d in C, %d in abi.go", name, v, want)
		}
	}
	for name := range goVals {
		if !found[name] {
			t.Errorf("%s missing from dpd_abi.h", name)
		}
	}
}

// TestCTTimeout pins the Go copy of the rule in dpd_ct_timeout_ns.
func TestCTTimeout(t *testing.T) {
	tests := []struct {
		proto uint8
		flags uint32
		want  int
	}{
		{6, 0, abi.CTTimeoutTCPOtherS},
		{6, abi.CTFEstablished, abi.CTTimeoutTCPEstS},
		{6, abi.CTFEstablished | abi.CTFClosing, abi.CTTimeoutTCPOtherS},
		{6, abi.CTFClosing, abi.CTTimeoutTCPOtherS},
		{6, abi.CTFClosing | abi.CTFFinOrig, abi.CTTimeoutTCPOtherS},
		{6, abi.CTFEstablished | abi.CTFClosing | abi.CTFFinReply, abi.CTTimeoutTCPOtherS},
		{6, abi.CTFEstablished | abi.CTFClosing | abi.CTFClosed, abi.CTTimeoutTCPClosedS},
		{6, abi.CTFClosed, abi.CTTimeoutTCPClosedS},
		{17, 0, abi.CTTimeoutUDPS},
		{1, 0, abi.CTTimeoutICMPS},
		{47, 0, abi.CTTimeoutOtherS},
	}
	for _, tc := range tests {
		if got := CTTimeout(tc.proto, tc.flags); got.Seconds() != float64(tc.want) {
			t.Errorf("CTTimeout(%d, %#x) = %s, want %ds", tc.proto, tc.flags, got, tc.want)
		}
	}
}
