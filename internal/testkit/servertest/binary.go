package servertest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// Binary says where a server's executable comes from, for example
//
//	servertest.Binary{Name: "redis-server", Env: "REDIS_SERVER",
//		Hint: "install it with `apt-get install redis-server` (or run `make test`, which installs it), or set REDIS_SERVER to its path"}
type Binary struct {
	// Name is the executable's name, looked up on PATH unless Find is set.
	Name string
	// Env names an environment variable that, when set, names the
	// executable to run instead (a path, or a name looked up on PATH).
	Env string
	// Find, when set, finds the executable instead of PATH (which is then
	// never searched), for example one built from a pinned module.
	Find func() (string, error)
	// Source says where the executable comes from when Env is unset, in
	// the message about a bad Env; the default is "NAME from PATH".
	Source string
	// Hint says how to get the executable, in the messages.
	Hint string
}

// Path returns the executable to run: $Env when set, else Find's, else
// Name found on PATH. Its errors say what was wrong and quote Hint.
func (b Binary) Path() (string, error) {
	if b.Env != "" {
		if env := os.Getenv(b.Env); env != "" {
			bin, err := exec.LookPath(env)
			if err != nil {
				source := b.Source
				if source == "" {
					source = b.Name + " from PATH"
				}
				return "", fmt.Errorf("%s=%q is not an executable (%v): fix or unset it to use %s; to get %s, %s",
					b.Env, env, err, source, b.Name, b.Hint)
			}
			return bin, nil
		}
	}
	if b.Find != nil {
		return b.Find()
	}
	bin, err := exec.LookPath(b.Name)
	if err != nil {
		return "", errors.New(b.Name + " not found on PATH: " + b.Hint)
	}
	return bin, nil
}
