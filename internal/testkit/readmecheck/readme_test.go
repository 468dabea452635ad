package readmecheck

import (
	"os"
	"os/exec"
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

	// A figure in the README must be one make bench prints on today's code:
	// figures stand only in the Performance section (its table, see
	// TestPerformanceTableIsCurrent), and nowhere a footnote.
	figure := regexp.MustCompile(`\d[\d.,–-]*\s*(k )?(ops/s|acq/s|acquisitions/s|cmds/acq|commands per|statements per)|util 0\.\d|p99 \d|[†‡§¶◊]`)
	perf := performance(t, readme)
	for i, l := range strings.Split(readme, "\n") {
		if f := figure.FindString(l); f != "" && !strings.Contains(perf, l) {
			t.Errorf("README line %d quotes a benchmark figure or footnote (%q) outside its Performance section: %s", i+1, f, l)
		}
	}
}

// performance returns the README's Performance section.
func performance(t *testing.T, readme string) string {
	t.Helper()
	_, after, ok := strings.Cut(readme, "\n## Performance\n")
	if !ok {
		t.Fatal("README has no Performance section")
	}
	section, _, _ := strings.Cut(after, "\n## ")
	return section
}

// benchedCode is where the Performance table's figures come from: the
// stores' and the core's Go code, and the benchmarks that measure them
// (see benched).
var benchedCode = []string{"lockmw", "internal/testkit/lockmwtest/benchsuite", "internal/testkit/redispeers", "internal/testkit/redistest", "internal/testkit/pgtest", "internal/testkit/zktest"}

// TestPerformanceTableIsCurrent holds the README's Performance table to the
// code it measured: the section names the commit make bench ran on
// ("main at commit H"), and no Go file of the benched code may differ from
// that commit (a doc.go, or another file of comments only, may: see
// codeChanged), so that no row predates a later change of what it
// measures. Re-run make bench and rewrite the table, with the new commit,
// after such a change.
func TestPerformanceTableIsCurrent(t *testing.T) {
	perf := performance(t, read(t, "README.md"))
	m := regexp.MustCompile(`main at commit ([0-9a-f]{7,40})`).FindStringSubmatch(perf)
	if m == nil {
		t.Fatal("README's Performance section does not name the commit make bench ran on (\"main at commit H\")")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: cannot compare the table's commit with the tree")
	}
	if err := exec.Command("git", "-C", root, "rev-parse", "--git-dir").Run(); err != nil {
		t.Skip("not a git checkout: cannot compare the table's commit with the tree")
	}
	if err := exec.Command("git", "-C", root, "cat-file", "-e", m[1]+"^{commit}").Run(); err != nil {
		t.Fatalf("README's Performance table names commit %s, which this checkout does not have (a shallow clone?): %v", m[1], err)
	}
	args := append([]string{"-C", root, "diff", "--name-only", m[1], "--"}, benchedCode...)
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		t.Fatalf("git diff against the table's commit %s: %v", m[1], err)
	}
	for _, f := range strings.Fields(string(out)) {
		if benched(f) && codeChanged(t, m[1], f) {
			t.Errorf("%s changed since commit %s, on which the README's Performance table was measured: re-run make bench and rewrite the table (with the new commit)", f, m[1])
		}
	}
}

// benched reports whether the figures depend on file f: a Go file that
// is not a test, or a benchmark's (bench*_test.go), or any Go file of the
// packages that only serve benchmarks (benchsuite, redispeers). Other
// tests measure nothing.
func benched(f string) bool {
	switch {
	case !strings.HasSuffix(f, ".go"):
		return false
	case !strings.HasSuffix(f, "_test.go"),
		strings.HasPrefix(filepath.Base(f), "bench"),
		strings.HasPrefix(f, "internal/testkit/lockmwtest/benchsuite/"),
		strings.HasPrefix(f, "internal/testkit/redispeers/"):
		return true
	}
	return false
}

// codeChanged reports whether file f differs from its version at commit
// in more than comments: a file with comment edits only (a doc.go, a
// reworded doc comment) leaves the figures as they were.
func codeChanged(t *testing.T, commit, f string) bool {
	t.Helper()
	old, err := exec.Command("git", "-C", root, "show", commit+":"+f).Output()
	if err != nil {
		return true // new, or renamed
	}
	now, err := os.ReadFile(filepath.Join(root, f))
	if err != nil {
		return true // deleted
	}
	return stripComments(string(old)) != stripComments(string(now))
}

// stripComments drops // comments and blank lines (enough for gofmt'ed Go:
// the test compares code, not formatting).
func stripComments(src string) string {
	var b strings.Builder
	for _, l := range strings.Split(src, "\n") {
		if i := strings.Index(l, "//"); i >= 0 && !strings.Contains(l[:i], "\"") && !strings.Contains(l[:i], "`") {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
