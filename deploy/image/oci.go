package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Media types of the OCI image spec.
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// BinaryPath is where the image holds dpd; it is the entrypoint.
const BinaryPath = "/usr/local/bin/dpd"

// options describe the image.
type options struct {
	Binary   string // path of the binary, for messages
	Tag      string // repository[:tag]
	Version  string
	Revision string
	Arch     string
	Created  time.Time
	binary   []byte
}

// summary is what write made.
type summary struct {
	Manifest  string // digest
	Config    string
	Layer     string
	LayerSize int
	DiffID    string
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type imageConfig struct {
	Created      string    `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       runConfig `json:"config"`
	RootFS       rootFS    `json:"rootfs"`
	History      []history `json:"history"`
}

type runConfig struct {
	Entrypoint []string          `json:"Entrypoint"`
	Env        []string          `json:"Env"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

// dockerManifest is one entry of a docker-archive's manifest.json.
type dockerManifest struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// write writes the image tarball to w.
func write(w io.Writer, o options) (summary, error) {
	var s summary
	if len(o.binary) == 0 {
		return s, fmt.Errorf("%s is empty", o.Binary)
	}
	layerTar, err := rootfsTar(o.binary, o.Created)
	if err != nil {
		return s, err
	}
	layer, err := gzipped(layerTar)
	if err != nil {
		return s, err
	}
	s.DiffID, s.Layer, s.LayerSize = digest(layerTar), digest(layer), len(layer)
	created := o.Created.UTC().Format(time.RFC3339)
	labels := map[string]string{"org.opencontainers.image.title": "dpd"}
	if o.Version != "" {
		labels["org.opencontainers.image.version"] = o.Version
	}
	if o.Revision != "" {
		labels["org.opencontainers.image.revision"] = o.Revision
	}
	cfg, err := json.Marshal(imageConfig{
		Created: created, Architecture: o.Arch, OS: "linux",
		Config:  runConfig{Entrypoint: []string{BinaryPath}, Env: []string{"PATH=/usr/local/bin"}, Labels: labels},
		RootFS:  rootFS{Type: "layers", DiffIDs: []string{s.DiffID}},
		History: []history{{Created: created, CreatedBy: "make image: the static dpd binary at " + BinaryPath + " on scratch"}},
	})
	if err != nil {
		return s, err
	}
	s.Config = digest(cfg)
	man, err := json.Marshal(manifest{
		SchemaVersion: 2, MediaType: mediaManifest,
		Config: descriptor{MediaType: mediaConfig, Digest: s.Config, Size: len(cfg)},
		Layers: []descriptor{{MediaType: mediaLayer, Digest: s.Layer, Size: len(layer)}},
	})
	if err != nil {
		return s, err
	}
	s.Manifest = digest(man)
	name := fullName(o.Tag)
	idx, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{{
		MediaType: mediaManifest, Digest: s.Manifest, Size: len(man),
		Platform: &platform{Architecture: o.Arch, OS: "linux"},
		Annotations: map[string]string{
			// containerd's (ctr import, docker load) and the OCI spec's
			// (podman load, skopeo) names for the image.
			"io.containerd.image.name":          name,
			"org.opencontainers.image.ref.name": tagOf(o.Tag),
		},
	}}})
	if err != nil {
		return s, err
	}
	docker, err := json.Marshal([]dockerManifest{{Config: blobPath(s.Config), RepoTags: []string{o.Tag}, Layers: []string{blobPath(s.Layer)}}})
	if err != nil {
		return s, err
	}
	tw := tar.NewWriter(w)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", idx},
		{"manifest.json", docker},
		{blobPath(s.Config), cfg},
		{blobPath(s.Manifest), man},
		{blobPath(s.Layer), layer},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: o.Created, Format: tar.FormatPAX}); err != nil {
			return s, err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: o.Created, Format: tar.FormatPAX}); err != nil {
			return s, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return s, err
		}
	}
	return s, tw.Close()
}

// rootfsTar is the one layer: the binary and its directories, owned by
// root, with fixed times.
func rootfsTar(bin []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, dir := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	// /tmp for anything that wants a scratch directory; dpd itself creates
	// its socket's directory.
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(BinaryPath, "/"), Mode: 0o755, Size: int64(len(bin)), ModTime: mtime, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gzipped compresses without a name or time in the header, so equal input
// gives equal bytes.
func gzipped(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }

// fullName is the reference as containerd and the kubelet spell it:
// dpd:v1 is docker.io/library/dpd:v1.
func fullName(ref string) string {
	if strings.LastIndex(ref, ":") <= strings.LastIndex(ref, "/") {
		ref += ":latest"
	}
	first, _, hasSlash := strings.Cut(ref, "/")
	switch {
	case !hasSlash:
		return "docker.io/library/" + ref
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		return "docker.io/" + ref
	}
	return ref
}

// tagOf is the tag part of repository[:tag] ("latest" when absent).
func tagOf(ref string) string {
	slash := strings.LastIndex(ref, "/")
	if i := strings.LastIndex(ref, ":"); i > slash {
		return ref[i+1:]
	}
	return "latest"
}
