package felixwire

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// Policy kinds of the current PolicyID, as upstream names its v3 resources.
const (
	KindNetworkPolicy                 = "NetworkPolicy"
	KindGlobalNetworkPolicy           = "GlobalNetworkPolicy"
	KindKubernetesNetworkPolicy       = "KubernetesNetworkPolicy"
	KindStagedNetworkPolicy           = model.KindStagedNetworkPolicy
	KindStagedGlobalNetworkPolicy     = model.KindStagedGlobalNetworkPolicy
	KindStagedKubernetesNetworkPolicy = model.KindStagedKubernetesNetworkPolicy
)

// Prefixes of older v1 policy names.
const (
	stagedPrefix = "staged:"
	knpPrefix    = "knp.default."
)

// upPolicyID converts an older policy reference (its tier, and the v1 name
// "[<namespace>/][staged:]<tier>.<name>" or
// "<namespace>/[staged:]knp.default.<name>") into the current PolicyID:
// the namespace and the kind split out, the staged: and knp.default.
// prefixes removed, as a v3.32+ Felix sends the same policy. The tier
// prefix of Calico policies stays in the name, so every older (tier, name)
// maps to a distinct id, and a policy's update, removal and tier
// references all map alike.
func upPolicyID(name string) (*felix.PolicyID, error) {
	if name == "" {
		return nil, errors.New("policy name is empty")
	}
	ns, rest, namespaced := strings.Cut(name, "/")
	if !namespaced {
		ns, rest = "", name
	} else if ns == "" || strings.Contains(rest, "/") {
		return nil, fmt.Errorf("policy name %q: want [<namespace>/]<name>", name)
	}
	staged := strings.HasPrefix(rest, stagedPrefix)
	rest = strings.TrimPrefix(rest, stagedPrefix)
	var kind string
	switch {
	case !namespaced && staged:
		kind = KindStagedGlobalNetworkPolicy
	case !namespaced:
		kind = KindGlobalNetworkPolicy
	case strings.HasPrefix(rest, knpPrefix):
		rest = strings.TrimPrefix(rest, knpPrefix)
		kind = KindKubernetesNetworkPolicy
		if staged {
			kind = KindStagedKubernetesNetworkPolicy
		}
	case staged:
		kind = KindStagedNetworkPolicy
	default:
		kind = KindNetworkPolicy
	}
	if rest == "" {
		return nil, fmt.Errorf("policy name %q: nothing after the prefixes", name)
	}
	return &felix.PolicyID{Name: rest, Namespace: ns, Kind: kind}, nil
}
