package cronlock_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// Singleton and New, which lose or double fires when the instances' timers
// differ by more than their hold, are deprecated in favour of
// NewScheduler, and no example shows them any more.
func TestHoldWrappersDeprecated(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var files, tests []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), "_test.go") {
			tests = append(tests, f)
		} else {
			files = append(files, f)
		}
	}
	pkg, err := doc.NewFromFiles(fset, files, "github.com/lockmw/lockmw/cronlock")
	if err != nil {
		t.Fatal(err)
	}
	deprecated := map[string]string{}
	for _, f := range pkg.Funcs {
		deprecated[f.Name] = f.Doc
	}
	for _, name := range []string{"Singleton", "New"} {
		d := deprecated[name]
		i := strings.Index(d, "\nDeprecated: ")
		if i < 0 || !strings.Contains(d[i:], "NewScheduler") {
			t.Errorf("%s's doc has no Deprecated: paragraph pointing at NewScheduler:\n%s", name, d)
		}
	}
	for _, ex := range doc.Examples(tests...) {
		if ex.Name == "Singleton" || ex.Name == "New" || strings.HasPrefix(ex.Name, "Singleton_") || strings.HasPrefix(ex.Name, "New_") {
			t.Errorf("Example%s still shows a deprecated wrapper", ex.Name)
		}
	}
}
