//go:build linux

package redistest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPauseReturnsOnceStopped checks that Pause returns only once every
// thread of redis-server has stopped (SIGSTOP takes effect when a thread
// of the process next runs): a paused server answers nothing.
func TestPauseReturnsOnceStopped(t *testing.T) {
	t.Parallel()
	s := Start(t, WithArgs("--io-threads", "2"))
	pid := s.proc.Run().Pid()
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "stat"))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of redis-server %d: %v, %v", pid, tasks, err)
	}
	for i := range 100 {
		s.Pause(t)
		for _, task := range tasks {
			stat, err := os.ReadFile(task)
			if err != nil {
				t.Fatal(err)
			}
			state := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))[0]
			if state != "T" && state != "t" {
				t.Fatalf("pause %d: Pause returned while %s says state %s", i, task, state)
			}
		}
		s.Resume(t)
	}
}
