package model

// PolicyKey identifies an active policy as upstream's PolicyID does: by
// kind, namespace and name (the tier is not part of the identity).
type PolicyKey struct {
	Kind, Namespace, Name string
}

func (k PolicyKey) String() string {
	s := k.Name
	if k.Namespace != "" {
		s = k.Namespace + "/" + s
	}
	if k.Kind != "" {
		s = k.Kind + ":" + s
	}
	return s
}

// TierRef is one tier of an endpoint: the policies that apply, by key, in
// order per direction. The engine resolves the keys to active policies.
type TierRef struct {
	Name          string
	DefaultAction Action // ActionDeny or ActionPass
	Ingress       []PolicyKey
	Egress        []PolicyKey
}

// Policy is an active policy: its rules per direction, before any endpoint
// references it.
type Policy struct {
	Key PolicyKey
	// Tier is the tier the controller placed the policy in ("" from
	// senders that name it only in endpoints' tier lists).
	Tier      string
	Inbound   []Rule
	Outbound  []Rule
	Untracked bool
	PreDNAT   bool
}

// Profile is an active profile: its rules per direction.
type Profile struct {
	Name     string
	Inbound  []Rule
	Outbound []Rule
}
