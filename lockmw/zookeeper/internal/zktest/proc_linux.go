package zktest

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"syscall"
)

// sysProcAttr puts the server in its own process group, so that signals
// reach it and any child it forks, and has the kernel SIGKILL it if the
// thread that started it (and so, in practice, the test binary) dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// canObserveStop is true where processStopped can see a stop take effect.
const canObserveStop = true

// processStopped reports whether every thread of process pid is in a
// stopped state ('T', or 't' under a tracer), as /proc shows it.
//
// kill(SIGSTOP) returns once the signal is queued: one thread of the process
// dequeues it and only then asks the others to stop. On a loaded machine
// that thread may not run for a while, and the server.s other threads meanwhile
// go on answering requests.
func processStopped(pid int) (bool, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(dir + "/" + task.Name() + "/stat")
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread has exited since the listing
		}
		if err != nil {
			return false, err
		}
		// "pid (comm) state ...": comm may hold spaces and parentheses,
		// the state follows the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			return false, errors.New("unexpected " + dir + "/" + task.Name() + "/stat: " + string(stat))
		}
		if st := stat[i+2]; st != 'T' && st != 't' {
			return false, nil
		}
	}
	return true, nil
}
