package tcbpf

import (
	"testing"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

func TestMapSizesFromConfig(t *testing.T) {
	def := DefaultMapSizes()
	tests := []struct {
		name    string
		cfg     map[string]string
		want    MapSizes
		wantErr bool
	}{
		{"defaults", nil, def, false},
		{"conntrack", map[string]string{ConfigConntrack: "1000"},
			func() MapSizes { s := def; s.Conntrack = 1000; return s }(), false},
		{"ifstate grows jump", map[string]string{ConfigIfState: "5000"},
			func() MapSizes { s := def; s.IfState = 5000; s.Jump = abi.JumpPolBase + 10000; return s }(), false},
		{"explicit jump wins", map[string]string{ConfigIfState: "5000", ConfigJump: "100"},
			func() MapSizes { s := def; s.IfState = 5000; s.Jump = 100; return s }(), false},
		{"jump too small", map[string]string{ConfigJump: "17"}, MapSizes{}, true},
		{"not a number", map[string]string{ConfigIPSets: "lots"}, MapSizes{}, true},
		{"negative", map[string]string{ConfigChain: "-1"}, MapSizes{}, true},
		{"empty keeps default", map[string]string{ConfigRuleCounters: ""}, def, false},
		{"fragments", map[string]string{ConfigFragments: "64"},
			func() MapSizes { s := def; s.Fragments = 64; return s }(), false},
		{"fragments zero", map[string]string{ConfigFragments: "0"}, MapSizes{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MapSizesFromConfig(tc.cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if def.Fragments != 8192 {
		t.Fatalf("default fragments %d, want the documented 8192", def.Fragments)
	}
	if got := def.Slots(); got != 1000 {
		t.Fatalf("default slots %d, want 1000", got)
	}
}
