package engine

import "github.com/dpd-dev/dpd/dataplane/model"

// newHostMetaManager tracks node addresses (HostMetadataUpdate), applied
// after endpoints and before routes, which may need them to reach a node.
func newHostMetaManager() *objectManager[string, model.HostMetadata] {
	return newObjectManager("host_metadata",
		func(a, b *model.HostMetadata) bool { return *a == *b },
		func(k string) string { return k })
}

func (e *Engine) onHostMetadataUpdate(u *model.HostMetadataUpdate) {
	h := u.Host
	e.hostMeta.set(h.Hostname, &h)
}

func (e *Engine) onHostMetadataRemove(r *model.HostMetadataRemove) {
	e.hostMeta.del(r.Hostname)
}
