package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var o options
	var created string
	fs.StringVar(&o.Binary, "binary", "", "the static dpd binary to put into the image")
	fs.StringVar(&o.Tag, "tag", "dpd:dev", "image name and tag (repository[:tag])")
	fs.StringVar(&o.Version, "version", "", "image version label (org.opencontainers.image.version)")
	fs.StringVar(&o.Revision, "revision", "", "source commit label (org.opencontainers.image.revision)")
	fs.StringVar(&o.Arch, "arch", runtime.GOARCH, "the binary's GOARCH")
	fs.StringVar(&created, "created", "0", "image and file time, Unix seconds (SOURCE_DATE_EPOCH) or RFC 3339")
	out := fs.String("out", "bin/dpd-image.tar", "the tarball to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.Binary == "" {
		return fmt.Errorf("--binary is required")
	}
	var err error
	if o.Created, err = parseTime(created); err != nil {
		return fmt.Errorf("--created: %w", err)
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return err
	}
	o.binary = bin
	f, err := os.CreateTemp(filepath.Dir(*out), ".dpd-image-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }() // gone after the rename
	sum, err := write(f, o)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	if err := os.Rename(f.Name(), *out); err != nil {
		return err
	}
	fmt.Printf("image %s: %s, manifest %s, layer %d bytes compressed\n", o.Tag, *out, sum.Manifest, sum.LayerSize)
	return nil
}

func parseTime(s string) (time.Time, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(n, 0).UTC(), nil
	}
	return time.Parse(time.RFC3339, s)
}
