package engine

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/dpd-dev/dpd"

// TestEngineKnowsNoWire: the engine takes model updates, not Felix
// messages. Its (non-test) dependencies include nothing of the server, the
// edge that translates the wire; and no package it depends on imports a
// proto package: its input is model.Update and its output engine.Status.
func TestEngineKnowsNoWire(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the engine's dependencies: %v", err)
	}
	list := func(args ...string) []string {
		out, err := exec.Command(goTool, append([]string{"list"}, args...)...).Output()
		if err != nil {
			t.Fatalf("go list %v: %v", args, err)
		}
		return strings.Fields(string(out))
	}
	self := list("-f", "{{.ImportPath}}", ".")[0]
	isProto := func(p string) bool { return strings.HasPrefix(p, modulePath+"/proto/") }

	var protoDeps []string
	for _, line := range list("-deps", "-f", "{{.ImportPath}}|{{join .Imports \",\"}}", ".") {
		pkg, imports, _ := strings.Cut(line, "|")
		if strings.HasPrefix(pkg, modulePath+"/server") {
			t.Errorf("the engine depends on %s: the wire is translated at the edge, not here", pkg)
		}
		if isProto(pkg) {
			protoDeps = append(protoDeps, pkg)
			continue
		}
		if pkg == self || !strings.HasPrefix(pkg, modulePath+"/") {
			continue
		}
		for _, imp := range strings.Split(imports, ",") {
			if isProto(imp) {
				t.Errorf("%s, which the engine depends on, imports %s", pkg, imp)
			}
		}
	}

	fset := token.NewFileSet()
	for _, name := range list("-f", "{{join .GoFiles \" \"}}", ".") {
		f, err := parser.ParseFile(fset, filepath.Clean(name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if isProto(path) {
				t.Errorf("%s imports %s: the engine speaks model updates and statuses, not the wire", name, path)
			}
		}
	}
	if len(protoDeps) > 0 {
		t.Errorf("the engine depends on %v", protoDeps)
	}
}
