package model

// The policy kinds (upstream PolicyID.kind) of staged policies: recorded,
// listed and traced by Felix, but never enforced. Older Felix marks the
// same policies by a "staged:" name prefix; the wire edge turns that into
// these kinds.
const (
	KindStagedNetworkPolicy           = "StagedNetworkPolicy"
	KindStagedGlobalNetworkPolicy     = "StagedGlobalNetworkPolicy"
	KindStagedKubernetesNetworkPolicy = "StagedKubernetesNetworkPolicy"
)

// IsStagedKind reports whether a policy of this kind is staged. A staged
// policy is left out of what an endpoint enforces, and a tier whose
// policies for a direction are all staged does not end in its default
// action: traffic goes on to the next tier, as Felix's dataplanes do.
func IsStagedKind(kind string) bool {
	switch kind {
	case KindStagedNetworkPolicy, KindStagedGlobalNetworkPolicy, KindStagedKubernetesNetworkPolicy:
		return true
	}
	return false
}
