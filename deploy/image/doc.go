// Command image assembles dpd's container image without a container
// engine: one layer holding the static dpd binary on an empty (scratch)
// base, written as a tarball that is at once an OCI image layout (for
// 'ctr images import', 'podman load', skopeo's oci-archive) and a
// docker-archive (a manifest.json for 'docker load'). The output is
// reproducible: every timestamp is the --created time.
//
//	go run ./deploy/image --binary bin/image/dpd --tag dpd:v1.2.3 --out bin/dpd-image.tar
package main
