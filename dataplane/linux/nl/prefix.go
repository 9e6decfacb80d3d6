package nl

import "strings"

// DefaultPrefix is Calico's default workload interface prefix.
const DefaultPrefix = "cali"

// ParsePrefixes splits a Felix-style InterfacePrefix value ("cali,tap") into
// its prefixes, dropping blanks. An empty value yields DefaultPrefix, because
// an unset config key must not silently match nothing.
func ParsePrefixes(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return []string{DefaultPrefix}
	}
	return out
}

// matchesAny reports whether name starts with one of prefixes.
func matchesAny(prefixes []string, name string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// cleanPrefixes copies prefixes without blanks, defaulting like ParsePrefixes.
func cleanPrefixes(prefixes []string) []string {
	return ParsePrefixes(strings.Join(prefixes, ","))
}
