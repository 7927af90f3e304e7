package v1alpha1_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedIsCurrent regenerates the deepcopy functions and the CRD
// with controller-gen (pinned in tools/go.mod) and compares them with the
// committed files: a type changed without `make generate` fails here.
func TestGeneratedIsCurrent(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command("go", "tool", "-modfile=tools/go.mod", "controller-gen", "object", "paths=./api/vmafxjob/...", "output:object:dir="+out,
		"crd:crdVersions=v1", "output:crd:dir="+out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, b)
	}
	for gen, committed := range map[string]string{
		"zz_generated.deepcopy.go":            "api/vmafxjob/v1alpha1/zz_generated.deepcopy.go",
		"vmafx.callerauth.dev_vmafxjobs.yaml": "deploy/crds/vmafx.callerauth.dev_vmafxjobs.yaml",
	} {
		want, err := os.ReadFile(filepath.Join(out, gen))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, committed))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s is not what controller-gen makes of the types: run make generate", committed)
		}
	}
}
