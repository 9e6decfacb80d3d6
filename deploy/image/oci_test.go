package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"testing"
	"time"
)

// readTar returns a tarball's regular files by name.
func readTar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = data
		}
	}
}

// blob returns the blob of a digest and fails unless its content has it.
func blob(t *testing.T, files map[string][]byte, d string) []byte {
	t.Helper()
	b, ok := files[blobPath(d)]
	if !ok {
		t.Fatalf("blob %s missing", d)
	}
	if got := digest(b); got != d {
		t.Fatalf("blob %s has digest %s", d, got)
	}
	return b
}

func TestWriteImage(t *testing.T) {
	bin := []byte("\x7fELF not really a binary")
	o := options{Binary: "dpd", Tag: "dpd:v1.2.3", Version: "v1.2.3", Revision: "abc", Arch: "amd64", Created: time.Unix(1700000000, 0).UTC(), binary: bin}
	var out bytes.Buffer
	sum, err := write(&out, o)
	if err != nil {
		t.Fatal(err)
	}
	files := readTar(t, out.Bytes())
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", files["oci-layout"])
	}

	var idx index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Digest != sum.Manifest || idx.MediaType != mediaIndex {
		t.Fatalf("index = %+v", idx)
	}
	if a := idx.Manifests[0].Annotations; a["io.containerd.image.name"] != "docker.io/library/dpd:v1.2.3" || a["org.opencontainers.image.ref.name"] != "v1.2.3" {
		t.Errorf("index annotations = %v", a)
	}
	var man manifest
	if err := json.Unmarshal(blob(t, files, sum.Manifest), &man); err != nil {
		t.Fatal(err)
	}
	if man.MediaType != mediaManifest || len(man.Layers) != 1 || man.Layers[0].MediaType != mediaLayer {
		t.Fatalf("manifest = %+v", man)
	}
	var cfg imageConfig
	if err := json.Unmarshal(blob(t, files, man.Config.Digest), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != BinaryPath ||
		cfg.Created != "2023-11-14T22:13:20Z" || cfg.Config.Labels["org.opencontainers.image.revision"] != "abc" {
		t.Errorf("config = %+v", cfg)
	}

	// The layer's diff id is the digest of its uncompressed tar, which
	// holds the binary, executable, at the entrypoint.
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, man.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != digest(layer) {
		t.Errorf("diff ids %v, layer tar is %s", cfg.RootFS.DiffIDs, digest(layer))
	}
	tr := tar.NewReader(bytes.NewReader(layer))
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if "/"+h.Name == BinaryPath {
			data, _ := io.ReadAll(tr)
			found = bytes.Equal(data, bin) && h.Mode == 0o755 && h.Uid == 0 && h.ModTime.Equal(o.Created)
		}
	}
	if !found {
		t.Errorf("layer lacks the binary at %s with mode 0755", BinaryPath)
	}

	// The docker-archive view names the same blobs.
	var dm []dockerManifest
	if err := json.Unmarshal(files["manifest.json"], &dm); err != nil {
		t.Fatal(err)
	}
	if len(dm) != 1 || dm[0].Config != blobPath(man.Config.Digest) || len(dm[0].Layers) != 1 || dm[0].Layers[0] != blobPath(man.Layers[0].Digest) || dm[0].RepoTags[0] != "dpd:v1.2.3" {
		t.Errorf("manifest.json = %+v", dm)
	}

	// Reproducible: the same input gives the same bytes.
	var again bytes.Buffer
	if _, err := write(&again, o); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), out.Bytes()) {
		t.Errorf("two writes of one image differ")
	}
}

func TestWriteImageRejectsEmptyBinary(t *testing.T) {
	if _, err := write(io.Discard, options{Binary: "x", Tag: "dpd:x"}); err == nil {
		t.Error("an empty binary made an image")
	}
}

func TestNames(t *testing.T) {
	for ref, want := range map[string][2]string{
		"dpd":                       {"docker.io/library/dpd:latest", "latest"},
		"dpd:v1":                    {"docker.io/library/dpd:v1", "v1"},
		"acme/dpd:v1":               {"docker.io/acme/dpd:v1", "v1"},
		"registry.example:5000/dpd": {"registry.example:5000/dpd:latest", "latest"},
		"ghcr.io/dpd-dev/dpd:v2":    {"ghcr.io/dpd-dev/dpd:v2", "v2"},
		"localhost/dpd:dev":         {"localhost/dpd:dev", "dev"},
	} {
		if got := fullName(ref); got != want[0] {
			t.Errorf("fullName(%s) = %s, want %s", ref, got, want[0])
		}
		if got := tagOf(ref); got != want[1] {
			t.Errorf("tagOf(%s) = %s, want %s", ref, got, want[1])
		}
	}
}
