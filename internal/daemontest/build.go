package daemontest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// GoCommand finds the go command: PATH, then $GOROOT/bin.
func GoCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no go command in PATH or $GOROOT/bin")
}

// ModuleRoot is the directory of the go.mod of the module the working
// directory is in (a test's working directory is its package's).
func ModuleRoot() (string, error) {
	goBin, err := GoCommand()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside a module")
	}
	return filepath.Dir(gomod), nil
}

// Build runs `go build -o out flags... pkg` at the module root, pkg being
// a path like ./cmd/dpd.
func Build(pkg, out string, flags ...string) error {
	goBin, err := GoCommand()
	if err != nil {
		return err
	}
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	args := append(append([]string{"build", "-o", out}, flags...), pkg)
	cmd := exec.Command(goBin, args...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}
