package engine

import (
	"testing"

	"github.com/dpd-dev/dpd/proto/felix"
)

// Namespace labels are kept as sent, replaced by a new update, and gone
// with the namespace's removal.
func TestNamespaceLabels(t *testing.T) {
	h := newHarness(t)
	h.session()
	ns := func(name string, labels map[string]string) *felix.ToDataplane {
		return td(&felix.NamespaceUpdate{Id: &felix.NamespaceID{Name: name}, Labels: labels})
	}
	h.send(ns("web", map[string]string{"team": "a"}), ns("db", nil), inSync())
	if l, ok := h.e.NamespaceLabels("web"); !ok || l["team"] != "a" {
		t.Fatalf("web's labels %v %v", l, ok)
	}
	if l, ok := h.e.NamespaceLabels("db"); !ok || len(l) != 0 {
		t.Fatalf("db's labels %v %v, want known and empty", l, ok)
	}
	h.send(ns("web", map[string]string{"team": "b"}), td(&felix.NamespaceRemove{Id: &felix.NamespaceID{Name: "db"}}))
	if l, _ := h.e.NamespaceLabels("web"); l["team"] != "b" {
		t.Fatalf("web's labels %v after the update", l)
	}
	if _, ok := h.e.NamespaceLabels("db"); ok {
		t.Fatal("db's labels kept after its removal")
	}
}
