package server

import (
	"fmt"
	"strings"

	"github.com/dpd-dev/dpd/dataplane/engine"
)

// namespaceLabeler is an Engine that knows the labels of namespaces.
type namespaceLabeler interface {
	NamespaceLabels(ns string) (map[string]string, bool)
}

// labelTerm is one term of an Observe label filter.
type labelTerm struct {
	key, value string
	hasValue   bool
	negate     bool
}

// parseLabelTerms reads "key=value", "key!=value", "key" and "!key".
func parseLabelTerms(in []string) ([]labelTerm, error) {
	var out []labelTerm
	for _, s := range in {
		s = strings.TrimSpace(s)
		var t labelTerm
		switch {
		case strings.Contains(s, "!="):
			t.key, t.value, _ = strings.Cut(s, "!=")
			t.hasValue, t.negate = true, true
		case strings.Contains(s, "="):
			t.key, t.value, _ = strings.Cut(s, "=")
			t.hasValue = true
		case strings.HasPrefix(s, "!"):
			t.key, t.negate = s[1:], true
		default:
			t.key = s
		}
		t.key, t.value = strings.TrimSpace(t.key), strings.TrimSpace(t.value)
		if t.key == "" || strings.ContainsAny(t.key, "=!") {
			return nil, fmt.Errorf("label %q: want key=value, key!=value, key or !key", s)
		}
		out = append(out, t)
	}
	return out, nil
}

func (t labelTerm) matches(labels map[string]string) bool {
	v, ok := labels[t.key]
	if t.hasValue {
		ok = ok && v == t.value
	}
	return ok != t.negate
}

// labelsMatch: ep is a local endpoint whose namespace's labels satisfy
// every term. An endpoint of no known namespace matches none.
func labelsMatch(terms []labelTerm, nl namespaceLabeler, ep *engine.EndpointInfo) bool {
	ns := namespaceOf(ep)
	if ns == "" || nl == nil {
		return false
	}
	labels, ok := nl.NamespaceLabels(ns)
	if !ok {
		return false
	}
	for _, t := range terms {
		if !t.matches(labels) {
			return false
		}
	}
	return true
}

// NamespaceLabels passes the engine's namespace labels through the
// policy-sync tap.
func (t tapEngine) NamespaceLabels(ns string) (map[string]string, bool) {
	if nl, ok := t.Engine.(namespaceLabeler); ok {
		return nl.NamespaceLabels(ns)
	}
	return nil, false
}
