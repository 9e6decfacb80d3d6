// Package deploy holds dpd's Kubernetes manifests (calico-node/: dpd as
// Felix's dataplane driver inside calico-node; standalone/: a DaemonSet for
// other controllers) and the test that decodes them strictly into the
// Kubernetes API types and checks what an install relies on. image/ builds
// the container image (make image).
package deploy
