package tcbpf

import (
	"encoding/binary"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

func TestFailsafeKey(t *testing.T) {
	k, v6, err := failsafeKey(Failsafe{Inbound: true, Proto: 6, Port: 22, Net: netip.MustParsePrefix("10.1.2.3/8")})
	if err != nil {
		t.Fatal(err)
	}
	if v6 || len(k) != abi.FailsafeKeySize || k[abi.FailsafeKeyFlags] != abi.FSInbound || k[abi.FailsafeKeyProto] != 6 ||
		k[abi.FailsafeKeyAddr] != 10 || k[abi.FailsafeKeyAddr+1] != 0 {
		t.Fatalf("key % x (v6 %v)", k, v6)
	}
	k, v6, err = failsafeKey(Failsafe{Proto: 17, Port: 53, Net: netip.MustParsePrefix("fd00:1::5/16")})
	if err != nil {
		t.Fatal(err)
	}
	if !v6 || len(k) != abi.FailsafeKey6Size || k[abi.FailsafeKeyFlags] != abi.FSOutbound ||
		binary.NativeEndian.Uint32(k) != abi.FSKeyFixedBits+16 ||
		k[abi.FailsafeKeyAddr] != 0xfd || k[abi.FailsafeKeyAddr+2] != 0 || k[abi.FailsafeKeyAddr+3] != 0 {
		t.Fatalf("IPv6 key % x (v6 %v)", k, v6)
	}
	for _, bad := range []netip.Prefix{{}, netip.MustParsePrefix("::ffff:10.0.0.0/104")} {
		if _, _, err := failsafeKey(Failsafe{Proto: 6, Port: 22, Net: bad}); err == nil {
			t.Errorf("failsafe net %v accepted", bad)
		}
	}
}

// The host entry programs load with the object and attach like the
// workload ones; dpd_failsafes holds exactly what SetFailsafes says.
func TestHostAttachAndFailsafes(t *testing.T) {
	d := openTest(t, Options{})
	a, _ := vethPair(t)
	name := ifName(t, a)
	if _, err := d.AttachHost(a, name); err != nil {
		t.Fatalf("attach host: %v", err)
	}
	if _, ok := d.AttachedCurrentHost(a, name); !ok {
		t.Fatal("host programs not current after AttachHost")
	}
	if _, ok := d.AttachedCurrent(a, name); ok {
		t.Fatal("workload programs reported current on a host interface")
	}
	if _, err := d.Attach(a, name); err != nil {
		t.Fatalf("attach workload over host: %v", err)
	}
	if _, ok := d.AttachedCurrent(a, name); !ok {
		t.Fatal("workload programs did not replace the host ones")
	}
	if err := d.Detach(a, name); err != nil {
		t.Fatal(err)
	}

	if err := d.SetHepStages(a, HepStages{Untracked: 3}); err != nil {
		t.Fatal(err)
	}
	if all, err := d.AllHepStages(); err != nil || all[a] != (HepStages{Untracked: 3}) {
		t.Fatalf("stages %v %v", all, err)
	}
	if err := d.SetHepStages(a, HepStages{}); err != nil {
		t.Fatal(err)
	}
	if all, err := d.AllHepStages(); err != nil || len(all) != 0 {
		t.Fatalf("stages after clearing %v %v", all, err)
	}

	ssh := Failsafe{Inbound: true, Proto: 6, Port: 22, Net: netip.MustParsePrefix("0.0.0.0/0")}
	dns := Failsafe{Proto: 17, Port: 53, Net: netip.MustParsePrefix("10.0.0.0/8")}
	bgp := Failsafe{Inbound: true, Proto: 6, Port: 179, Net: netip.MustParsePrefix("0.0.0.0/0")}
	ssh6 := Failsafe{Inbound: true, Proto: 6, Port: 22, Net: netip.MustParsePrefix("::/0")}
	dns6 := Failsafe{Proto: 17, Port: 53, Net: netip.MustParsePrefix("fd00::/8")}
	for _, want := range [][]Failsafe{{ssh, dns, ssh6}, {dns, bgp, dns6}, {ssh6}, nil} {
		if err := d.SetFailsafes(want); err != nil {
			t.Fatal(err)
		}
		got, err := d.Failsafes()
		if err != nil {
			t.Fatal(err)
		}
		key := func(f Failsafe) string { return f.Net.String() + string(rune(f.Port)) + string(rune(f.Proto)) }
		slices.SortFunc(got, func(x, y Failsafe) int { return strings.Compare(key(x), key(y)) })
		slices.SortFunc(want, func(x, y Failsafe) int { return strings.Compare(key(x), key(y)) })
		if !slices.Equal(got, want) {
			t.Fatalf("failsafes %v, want %v", got, want)
		}
	}
}

// dpd_hep.h hard-codes polprog's no-match counter ids; abi.go mirrors them
// (and a polprog test checks those).
func TestHepNoMatchDefines(t *testing.T) {
	b, err := os.ReadFile("../../bpf/dpd_hep.h")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint64{"DPD_NOMATCH_ID_FROM_WEP": abi.NoMatchIDFromWEP, "DPD_NOMATCH_ID_TO_WEP": abi.NoMatchIDToWEP} {
		m := regexp.MustCompile(`#define\s+` + name + `\s+0x([0-9a-f]+)ull`).FindSubmatch(b)
		if m == nil {
			t.Errorf("%s not in dpd_hep.h", name)
			continue
		}
		if got, _ := strconv.ParseUint(string(m[1]), 16, 64); got != want {
			t.Errorf("%s = %#x in C, %#x in abi.go", name, got, want)
		}
	}
}

func ifName(t *testing.T, ifindex int) string {
	t.Helper()
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Name
}
