package server

import (
	"testing"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// labeledEngine adds namespace labels to the Observe fixture's engine.
type labeledEngine struct {
	fakeEngine
	ns map[string]map[string]string
}

func (l labeledEngine) NamespaceLabels(ns string) (map[string]string, bool) {
	v, ok := l.ns[ns]
	return v, ok
}

func TestObserveLabelFilter(t *testing.T) {
	s, _ := observeFixture()
	s.engine = labeledEngine{fakeEngine: s.engine.(fakeEngine), ns: map[string]map[string]string{
		"ns":   {"team": "web", "env": "prod"},
		"data": {"team": "db"},
	}}
	for _, tc := range []struct {
		labels []string
		want   []uint64
	}{
		{[]string{"team=web"}, []uint64{1, 2}}, // web is the source of both
		{[]string{"team=db"}, []uint64{2, 3}},  // db is flow 2's destination and flow 3's source
		{[]string{"team=web", "env=prod"}, []uint64{1, 2}},
		{[]string{"env"}, []uint64{1, 2}},
		{[]string{"!env"}, []uint64{2, 3}}, // db's namespace has no env
		{[]string{"team!=web"}, []uint64{2, 3}},
		{[]string{"team=none"}, nil},
	} {
		got := seqs(observe(t, s, &dpdv1.ObserveRequest{Labels: tc.labels}))
		if len(got) != len(tc.want) || (len(got) > 0 && (got[0] != tc.want[0] || got[len(got)-1] != tc.want[len(tc.want)-1])) {
			t.Errorf("labels %v: flows %v, want %v", tc.labels, got, tc.want)
		}
	}
	for _, bad := range []string{"", "=x", "!"} {
		st := &observeStream{ctx: t.Context(), sent: make(chan *dpdv1.ObserveResponse, 10)}
		if err := s.Observe(&dpdv1.ObserveRequest{Labels: []string{bad}}, st); err == nil {
			t.Errorf("label %q accepted", bad)
		}
	}
}
