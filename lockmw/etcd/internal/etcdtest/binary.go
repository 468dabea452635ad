//go:build unix

package etcdtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/servertest"
)

// The etcd server the tests run is $LOCKMW_ETCD when that is set, else the
// repository's own build of the etcd server pinned in internal/tools/etcd:
// .bin/etcd at the repository root, which `make etcd` (and so `make test`)
// builds, and which findBinary builds itself when it is missing or of
// another version. etcd is never taken from $PATH.
const (
	// binaryEnv names the variable that points the tests at another etcd.
	binaryEnv = "LOCKMW_ETCD"
	// toolsDir is the module, relative to the repository root, that pins
	// the etcd server as a tool (a module of its own, outside go.work, so
	// that etcd's dependencies never enter the workspace's build list).
	toolsDir = "internal/tools/etcd"
	// serverModule is the etcd server's module, a main package.
	serverModule = "go.etcd.io/etcd/server/v3"
	// builtBinary is where the build goes, relative to the repository root
	// (git-ignored).
	builtBinary = ".bin/etcd"
	// buildTimeout bounds findBinary's own build (15–90 s on these
	// machines without a build cache).
	buildTimeout = 10 * time.Minute
)

// buildCommand is the command that builds the pinned etcd, to run at the
// repository root; `make etcd` runs it too.
const buildCommand = "cd " + toolsDir + " && GOWORK=off go build -o ../../../" + builtBinary + " " + serverModule

// built caches findBinary's answer for the repository's build: it is
// checked (and built, if need be) once per test binary.
var built struct {
	once sync.Once
	bin  string
	err  error
}

// binary is where etcd comes from: never from PATH.
var binary = servertest.Binary{
	Name:   "etcd",
	Env:    binaryEnv,
	Source: "the etcd pinned in " + toolsDir,
	Hint:   "build it with `make etcd` at the repository root (into " + builtBinary + ")",
	Find: func() (string, error) {
		built.once.Do(func() { built.bin, built.err = repositoryBinary() })
		return built.bin, built.err
	},
}

// findBinary returns the etcd binary to run.
func findBinary() (string, error) { return binary.Path() }

// repositoryBinary returns the repository's .bin/etcd, building it first
// when it is missing or not the pinned version. The build holds a file
// lock, so that the test binaries of several packages (go test runs them in
// parallel) build it once, and goes to a temporary name renamed into place,
// so that nobody runs a half-written binary.
func repositoryBinary() (string, error) {
	root, err := repositoryRoot()
	if err != nil {
		return "", err
	}
	return binaryIn(root)
}

// binaryIn returns root's .bin/etcd, building it first if need be (see
// repositoryBinary).
func binaryIn(root string) (string, error) {
	want, err := pinnedVersion(filepath.Join(root, toolsDir, "go.mod"))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, builtBinary)
	if got, _ := binaryVersion(bin); got == want {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking %s: %v", lock.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	// Another test binary may have built it while this one waited.
	if got, _ := binaryVersion(bin); got == want {
		return bin, nil
	}
	if err := build(root, bin); err != nil {
		return "", err
	}
	got, err := binaryVersion(bin)
	if err != nil {
		return "", err
	}
	if got != want {
		return "", fmt.Errorf("%s reports etcd %s after the build, want %s (pinned in %s/go.mod)", bin, got, want, toolsDir)
	}
	return bin, nil
}

// build builds the pinned etcd server into bin.
func build(root, bin string) error {
	fail := func(err error, out []byte) error {
		msg := fmt.Sprintf("building the etcd the tests run: %v", err)
		if len(out) > 0 {
			msg += "\n" + string(bytes.TrimSpace(out))
		}
		return fmt.Errorf("%s\nbuild it at the repository root with `%s` (or `make etcd`), or set %s to an etcd binary",
			msg, buildCommand, binaryEnv)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fail(err, nil)
	}
	tmp := bin + ".tmp" + strconv.Itoa(os.Getpid())
	cmd := exec.Command(goBin, "build", "-o", tmp, serverModule)
	cmd.Dir = filepath.Join(root, toolsDir)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.WaitDelay = time.Second
	timer := time.AfterFunc(buildTimeout, func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	})
	out, err := cmd.CombinedOutput()
	timer.Stop()
	if err != nil {
		_ = os.Remove(tmp)
		return fail(err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		_ = os.Remove(tmp)
		return fail(err, nil)
	}
	return nil
}

// repositoryRoot returns the lockmw repository holding the working
// directory (a test runs in its package's directory): the nearest
// directory above it with internal/tools/etcd/go.mod.
func repositoryRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, toolsDir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no etcd to run: %s is not inside the lockmw repository (no %s/go.mod above it), "+
				"so there is no pinned etcd to build; set %s to an etcd binary", wd, toolsDir, binaryEnv)
		}
		dir = parent
	}
}

// pinnedVersion returns the etcd server version that gomod requires
// ("3.6.16" for "go.etcd.io/etcd/server/v3 v3.6.16").
func pinnedVersion(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && fields[0] == serverModule {
			return strings.TrimPrefix(fields[1], "v"), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s requires no %s", gomod, serverModule)
}

// binaryVersion returns the version bin reports ("etcd Version: 3.6.16").
func binaryVersion(bin string) (string, error) {
	cmd := exec.Command(bin, "--version")
	cmd.Env = etcdEnv()
	out, err := cmd.Output()
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "etcd Version: "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", errors.New(bin + " --version printed no etcd version")
}
