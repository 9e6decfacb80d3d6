package tcbpf

import (
	"errors"
	"testing"
	"time"
)

func TestChooseAttachMode(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name      string
		requested string
		costs     KernelCosts
		want      AttachMode
	}{
		{"cheap tcx", "auto", KernelCosts{TCXFirstAttach: ms / 2, LegacyAttach: ms}, AttachTCX},
		{"grace period", "auto", KernelCosts{TCXFirstAttach: 10 * ms, LegacyAttach: ms}, AttachTC},
		{"slow but legacy slower", "auto", KernelCosts{TCXFirstAttach: 10 * ms, LegacyAttach: 5 * ms}, AttachTCX},
		{"fast enough whatever legacy", "", KernelCosts{TCXFirstAttach: ms, LegacyAttach: ms / 10}, AttachTCX},
		{"no tcx", "auto", KernelCosts{TCXErr: errors.New("not supported"), LegacyAttach: ms}, AttachTC},
		{"forced tcx", "tcx", KernelCosts{TCXFirstAttach: time.Second}, AttachTCX},
		{"forced tc", "tc", KernelCosts{}, AttachTC},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			measured := 0
			got, err := ChooseAttachMode(c.requested, func() (KernelCosts, error) { measured++; return c.costs, nil })
			if err != nil {
				t.Fatal(err)
			}
			if got.Mode != c.want || got.Reason == "" {
				t.Fatalf("got %+v, want mode %s with a reason", got, c.want)
			}
			if forced := c.requested == "tcx" || c.requested == "tc"; forced != (measured == 0) {
				t.Fatalf("measured %d times for requested %q", measured, c.requested)
			}
		})
	}
	if _, err := ChooseAttachMode("tcx2", nil); err == nil {
		t.Fatal("bad mode accepted")
	}
	if _, err := ChooseAttachMode("auto", func() (KernelCosts, error) { return KernelCosts{}, errors.New("boom") }); err == nil {
		t.Fatal("measurement error swallowed")
	}
}
