package deploy

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// dpdCapabilities are the only ones a container running dpd may add
// (docs/deploy.md says why each).
var dpdCapabilities = []corev1.Capability{"BPF", "NET_ADMIN", "SYS_ADMIN"}

// privilegedReason is the pod annotation prefix that must justify each
// privileged container: dpd.dev/privileged.<container>.
const privilegedReason = "dpd.dev/privileged."

// decodeStrict decodes every YAML document of a file into the API type of
// its kind; unknown or duplicate fields are errors.
func decodeStrict(t *testing.T, path string) []any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []any
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		var obj any
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 DaemonSet":
			obj = &appsv1.DaemonSet{}
		default:
			t.Fatalf("%s document %d: no decoder for %s %s", path, i, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s document %d (%s): %v", path, i, head.Kind, err)
		}
		objs = append(objs, obj)
	}
	if len(objs) == 0 {
		t.Fatalf("%s holds no manifest", path)
	}
	return objs
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func daemonSet(t *testing.T, path string) *appsv1.DaemonSet {
	t.Helper()
	objs := decodeStrict(t, path)
	if len(objs) != 1 {
		t.Fatalf("%s: %d objects, want one DaemonSet", path, len(objs))
	}
	return objs[0].(*appsv1.DaemonSet)
}

// TestStrictDecodingRejectsUnknownFields: the decoding the manifests get
// would catch a misspelt field.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	bad := []byte("apiVersion: apps/v1\nkind: DaemonSet\nspec:\n  template:\n    spec:\n      hostNetwrok: true\n")
	if err := yaml.UnmarshalStrict(bad, &appsv1.DaemonSet{}); err == nil || !strings.Contains(err.Error(), "hostNetwrok") {
		t.Fatalf("strict decoding accepted an unknown field: %v", err)
	}
}

// TestEveryManifestDecodes: every YAML file under deploy/ is a manifest
// the test knows and decodes strictly, so none escapes the checks below.
func TestEveryManifestDecodes(t *testing.T) {
	files, err := filepath.Glob("*/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checked := []string{"calico-node/dpd-patch.yaml", "standalone/dpd.yaml"}
	for _, f := range files {
		decodeStrict(t, f)
		if !slices.Contains(checked, f) {
			t.Errorf("%s is not checked by a test of its own", f)
		}
	}
	if len(files) < len(checked) {
		t.Errorf("found %v, want at least %v", files, checked)
	}
}

// checkPodSecurity: a privileged container carries a reason; any other
// drops every capability and adds only dpd's.
func checkPodSecurity(t *testing.T, tmpl corev1.PodTemplateSpec, patched bool) {
	t.Helper()
	all := append(append([]corev1.Container(nil), tmpl.Spec.InitContainers...), tmpl.Spec.Containers...)
	for _, c := range all {
		sc := c.SecurityContext
		if sc != nil && sc.Privileged != nil && *sc.Privileged {
			if strings.TrimSpace(tmpl.Annotations[privilegedReason+c.Name]) == "" {
				t.Errorf("container %s is privileged without a %s%s annotation saying why", c.Name, privilegedReason, c.Name)
			}
			continue
		}
		if patched && sc == nil {
			continue // a container the patch does not change (calico-node keeps calico.yaml's)
		}
		if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("container %s does not drop ALL capabilities", c.Name)
			continue
		}
		for _, add := range sc.Capabilities.Add {
			if !slices.Contains(dpdCapabilities, add) {
				t.Errorf("container %s adds %s, which dpd does not need", c.Name, add)
			}
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s allows privilege escalation", c.Name)
		}
	}
}

// checkBPFFS: the container mounts the host's /sys/fs/bpf, Bidirectional.
func checkBPFFS(t *testing.T, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	m, ok := mountAt(c, "/sys/fs/bpf")
	if !ok {
		t.Errorf("container %s does not mount /sys/fs/bpf", c.Name)
		return
	}
	if m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional {
		got := "none"
		if m.MountPropagation != nil {
			got = string(*m.MountPropagation)
		}
		t.Errorf("container %s mounts /sys/fs/bpf with propagation %s, want Bidirectional", c.Name, got)
	}
	if v := volume(spec, m.Name); v.HostPath == nil || v.HostPath.Path != "/sys/fs/bpf" {
		t.Errorf("volume %s of /sys/fs/bpf is not the host's /sys/fs/bpf: %+v", m.Name, v)
	}
}

func mountAt(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) == path {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

// mountHolding is the mount of c under which path lies.
func mountHolding(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(path, filepath.Clean(m.MountPath)+"/") {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

func volume(spec corev1.PodSpec, name string) corev1.Volume {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	return corev1.Volume{}
}

func container(t *testing.T, cs []corev1.Container, name string) corev1.Container {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// documentedEnv are the DPD_* variables of the flags README.md documents.
func documentedEnv(t *testing.T) map[string]bool {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)`").FindAllSubmatch(readme, -1) {
		env["DPD_"+strings.ToUpper(strings.ReplaceAll(string(m[1]), "-", "_"))] = true
	}
	if len(env) < 10 {
		t.Fatalf("README.md's flag table gave only %v", env)
	}
	return env
}

func checkDPDEnv(t *testing.T, c corev1.Container) {
	t.Helper()
	known := documentedEnv(t)
	for name := range envOf(c) {
		if strings.HasPrefix(name, "DPD_") && !known[name] {
			t.Errorf("container %s sets %s, which is no flag README.md documents", c.Name, name)
		}
	}
}

func TestCalicoNodePatch(t *testing.T) {
	ds := daemonSet(t, "calico-node/dpd-patch.yaml")
	if ds.Name != "calico-node" || ds.Namespace != "kube-system" {
		t.Errorf("patch targets %s/%s, want kube-system/calico-node", ds.Namespace, ds.Name)
	}
	spec := ds.Spec.Template.Spec
	checkPodSecurity(t, ds.Spec.Template, true)

	node := container(t, spec.Containers, "calico-node")
	env := envOf(node)
	driver := env["FELIX_DATAPLANEDRIVER"]
	for name, want := range map[string]string{"FELIX_USEINTERNALDATAPLANEDRIVER": "false", "DPD_FELIX_PIPE": "1"} {
		if env[name] != want {
			t.Errorf("calico-node %s=%q, want %q", name, env[name], want)
		}
	}
	if !filepath.IsAbs(driver) {
		t.Fatalf("FELIX_DATAPLANEDRIVER=%q is not an absolute path", driver)
	}
	checkDPDEnv(t, node)

	// The init container copies dpd to the driver path, through a volume
	// calico-node mounts there.
	install := container(t, spec.InitContainers, "install-dpd")
	if cmd := strings.Join(append(install.Command, install.Args...), " "); !strings.Contains(cmd, "--install-to "+driver) && !strings.Contains(cmd, "--install-to="+driver) {
		t.Errorf("install-dpd runs %q, which does not install to %s", cmd, driver)
	}
	nodeMount, ok1 := mountHolding(node, driver)
	initMount, ok2 := mountHolding(install, driver)
	if !ok1 || !ok2 || nodeMount.Name != initMount.Name || nodeMount.MountPath != initMount.MountPath {
		t.Errorf("%s is not on one volume in both containers: calico-node %+v, install-dpd %+v", driver, nodeMount, initMount)
	} else if v := volume(spec, nodeMount.Name); v.EmptyDir == nil {
		t.Errorf("the binary's volume %s is not an emptyDir: %+v", v.Name, v)
	}

	// Policy sync: dpd serves it from the pod2daemon host directory, and
	// Felix does not as well.
	dir := env["DPD_POLICYSYNC_DIR"]
	m, ok := mountAt(node, dir)
	if dir == "" || !ok {
		t.Errorf("DPD_POLICYSYNC_DIR=%q is not a mount of calico-node", dir)
	} else if v := volume(spec, m.Name); v.HostPath == nil || v.HostPath.Path != "/var/run/nodeagent" {
		t.Errorf("the policy-sync directory is not the host's /var/run/nodeagent: %+v", v)
	}
	if _, set := env["FELIX_POLICYSYNCPATHPREFIX"]; set {
		t.Errorf("FELIX_POLICYSYNCPATHPREFIX is set: Felix would serve the same sockets as dpd")
	}
	// Felix's Prometheus port is 9091, dpd's default.
	if _, port, err := net.SplitHostPort(env["DPD_METRICS_ADDR"]); err != nil || port == "9091" {
		t.Errorf("DPD_METRICS_ADDR=%q: want a host:port other than Felix's 9091 (%v)", env["DPD_METRICS_ADDR"], err)
	}
	if sock := env["DPD_SOCKET"]; sock != "" {
		if _, ok := mountHolding(node, sock); !ok {
			t.Errorf("DPD_SOCKET=%s is not on a volume", sock)
		}
	}
	checkBPFFS(t, spec, node)
}

// peakRSS is P6 of BENCHMARKS.md, the measured peak RSS.
func peakRSS(t *testing.T) resource.Quantity {
	t.Helper()
	b, err := os.ReadFile("../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\| P6 \|[^|]*\| ([0-9.]+) MiB \|`).FindSubmatch(b)
	if m == nil {
		t.Fatal("BENCHMARKS.md has no P6 (peak RSS) row")
	}
	mib, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return *resource.NewQuantity(int64(mib*(1<<20)), resource.BinarySI)
}

func TestStandaloneDaemonSet(t *testing.T) {
	ds := daemonSet(t, "standalone/dpd.yaml")
	spec := ds.Spec.Template.Spec
	checkPodSecurity(t, ds.Spec.Template, false)
	if !spec.HostNetwork {
		t.Error("dpd must run in the host's network namespace (hostNetwork: true)")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("dpd needs no API token: automountServiceAccountToken must be false")
	}
	if sel := ds.Spec.Selector; sel == nil || !labelsMatch(sel.MatchLabels, ds.Spec.Template.Labels) {
		t.Errorf("selector %v does not match the template's labels %v", sel, ds.Spec.Template.Labels)
	}
	c := container(t, spec.Containers, "dpd")
	checkDPDEnv(t, c)
	checkBPFFS(t, spec, c)
	args := map[string]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(a, "=")
		args[k] = v
	}
	// The socket is on the host, for the controller.
	sock := args["--socket"]
	if m, ok := mountHolding(c, sock); !ok {
		t.Errorf("--socket=%q is not on a volume", sock)
	} else if v := volume(spec, m.Name); v.HostPath == nil {
		t.Errorf("the socket's volume %s is not a hostPath", m.Name)
	}
	// Probes: /livez and /readyz where --metrics-addr serves them.
	host, port, err := net.SplitHostPort(args["--metrics-addr"])
	if err != nil {
		t.Fatalf("--metrics-addr=%q: %v", args["--metrics-addr"], err)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		want := map[string]string{"liveness": "/livez", "readiness": "/readyz", "startup": "/livez"}[name]
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no %s probe over HTTP", name)
			continue
		}
		g := p.HTTPGet
		if g.Path != want || g.Port.String() != port || (host != "" && host != "0.0.0.0" && g.Host != host) {
			t.Errorf("%s probe gets %s:%s%s, want %s:%s%s", name, g.Host, g.Port.String(), g.Path, host, port, want)
		}
	}
	// Resources: the request covers the measured peak, the limit leaves room.
	req, lim := c.Resources.Requests[corev1.ResourceMemory], c.Resources.Limits[corev1.ResourceMemory]
	peak := peakRSS(t)
	if req.Cmp(peak) < 0 {
		t.Errorf("memory request %s is below the measured peak RSS %s", req.String(), peak.String())
	}
	if lim.Cmp(req) <= 0 {
		t.Errorf("memory limit %s does not exceed the request %s", lim.String(), req.String())
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Error("a CPU limit throttles the dataplane's apply loop; request CPU only")
	}
	if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
		t.Error("no CPU request")
	}
}

func labelsMatch(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// The image the manifests name is the one make image tags by default
// without a version: dpd:dev (docs/deploy.md says how to point it
// elsewhere).
func TestImages(t *testing.T) {
	for _, f := range []string{"calico-node/dpd-patch.yaml", "standalone/dpd.yaml"} {
		ds := daemonSet(t, f)
		for _, c := range append(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers...) {
			if c.Image == "" {
				continue // the patch leaves calico-node's image alone
			}
			if c.Image != "dpd:dev" {
				t.Errorf("%s: container %s runs %s, want dpd:dev", f, c.Image, c.Name)
			}
			if c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("%s: container %s pulls %s; an imported image needs IfNotPresent", f, c.Name, c.ImagePullPolicy)
			}
		}
	}
}
