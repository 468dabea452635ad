package readmecheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../../.."

// maxLines is the README's budget: an entry page; mechanism and footnotes
// belong in the package documentation.
const maxLines = 300

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// makeVar returns the value of the Makefile variable name (NAME := value),
// with $(OTHER) references expanded.
func makeVar(t *testing.T, makefile, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` [:?]?= *(.*)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("Makefile: no %s", name)
	}
	return regexp.MustCompile(`\$\(([A-Z_]+)\)`).ReplaceAllStringFunc(m[1], func(ref string) string {
		return makeVar(t, makefile, ref[2:len(ref)-1])
	})
}

// recipe returns the lines of the Makefile target's recipe.
func recipe(t *testing.T, makefile, target string) string {
	t.Helper()
	m := regexp.MustCompile(`(?ms)^` + target + `:[^\n]*\n((?:\t[^\n]*\n)+)`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("Makefile: no target %s", target)
	}
	return m[1]
}

// row returns the README's Commands table row of command.
func row(t *testing.T, readme, command string) string {
	t.Helper()
	for _, l := range strings.Split(readme, "\n") {
		if strings.HasPrefix(l, "| `"+command) {
			return l
		}
	}
	t.Fatalf("README: no Commands row for %s", command)
	return ""
}

func TestREADME(t *testing.T) {
	readme, makefile := read(t, "README.md"), read(t, "Makefile")

	if n := strings.Count(readme, "\n"); n > maxLines {
		t.Errorf("README has %d lines, more than %d", n, maxLines)
	}

	test := row(t, readme, "make test")
	for _, m := range strings.Fields(makeVar(t, makefile, "TEST_MODULES")) {
		if m == "." {
			m = "root"
		} else {
			m = "`" + m + "`"
		}
		if !strings.Contains(test, m) {
			t.Errorf("README's make test row does not name the module %s that make test runs", m)
		}
	}
	for _, pkg := range strings.Fields(strings.Split(strings.Split(makefile, "\ntest: ")[1], "\n")[0]) {
		if pkg != "etcd" && !strings.Contains(test, "`"+pkg+"`") {
			t.Errorf("README's make test row does not say that make test installs %s", pkg)
		}
	}

	chaos := row(t, readme, "make chaos")
	if runs, named := strings.Count(recipe(t, makefile, "chaos"), "TestChaos"), len(regexp.MustCompile(`Redis, Redlock, etcd, ZooKeeper, MariaDB, PostgreSQL`).FindAllString(chaos, -1)); runs != 5 || named != 1 {
		t.Errorf("make chaos runs TestChaos %d times; README's row %q should name its six stores (Redis and Redlock in one run)", runs, chaos)
	}

	mods, err := filepath.Glob(filepath.Join(root, "lockmw", "*", "go.mod"))
	if err != nil || len(mods) == 0 {
		t.Fatalf("no store modules: %v", err)
	}
	for _, m := range mods {
		path := "github.com/lockmw/lockmw/lockmw/" + filepath.Base(filepath.Dir(m))
		if !strings.Contains(readme, "go get "+path) {
			t.Errorf("README's Install does not list %s", path)
		}
		if !strings.Contains(readme, "https://pkg.go.dev/"+path) {
			t.Errorf("README's Documentation does not link %s", path)
		}
	}

	demo := recipe(t, makefile, "demo")
	mains, _ := filepath.Glob(filepath.Join(root, "examples", "*", "main.go"))
	for _, m := range mains {
		ex := "examples/" + filepath.Base(filepath.Dir(m))
		if !strings.Contains(readme, "./"+ex) {
			t.Errorf("README does not list %s", ex)
		}
		if ex != "examples/etcd" && !strings.Contains(demo, ex) {
			t.Errorf("make demo does not run %s", ex)
		}
	}

	// A figure in the README must be one make bench prints on today's code;
	// none can be kept in step by hand, so the README quotes none.
	figure := regexp.MustCompile(`\d[\d.,–-]*\s*(k )?(ops/s|acq/s|acquisitions/s|cmds/acq|commands per|statements per)|util 0\.\d|p99 \d|[†‡§¶◊]`)
	for i, l := range strings.Split(readme, "\n") {
		if f := figure.FindString(l); f != "" {
			t.Errorf("README line %d quotes a benchmark figure or footnote (%q): %s", i+1, f, l)
		}
	}
}
