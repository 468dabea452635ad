package servertest

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts a run in its own process group, so that signals reach
// it and any child it forks, and has the kernel SIGKILL it if the thread
// that started it (and so, in practice, the test binary) dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// canObserveStop is true where groupStopped can see a stop take effect.
const canObserveStop = true

// groupStopped reports whether every thread of every process in process
// group pgid is stopped ('T', or 't' under a tracer), as /proc shows it.
// The group leader is looked at first; only once all its threads have
// stopped are the other processes of the group looked for (a shell script
// that runs the server as its child, for example), in all of /proc.
func groupStopped(pgid int) (bool, error) {
	stopped, err := threadsStopped(pgid)
	if err != nil || !stopped {
		return false, err
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return false, err
	}
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone since the listing, or not ours to read
		}
		fields, ok := statFields(stat)
		// After "pid (comm)": state ppid pgrp ...
		if !ok || len(fields) < 3 || fields[2] != strconv.Itoa(pgid) {
			continue
		}
		if stopped, err := threadsStopped(pid); err != nil || !stopped {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return false, err
		}
	}
	return true, nil
}

// threadsStopped reports whether every thread of process pid is stopped,
// or gone ('Z', 'X': exited, not yet reaped).
func threadsStopped(pid int) (bool, error) {
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
		fields, ok := statFields(stat)
		if !ok || len(fields) < 1 || len(fields[0]) != 1 {
			return false, errors.New("unexpected " + dir + "/" + task.Name() + "/stat: " + string(stat))
		}
		switch fields[0][0] {
		case 'T', 't', 'Z', 'X':
		default:
			return false, nil
		}
	}
	return true, nil
}

// statFields returns the fields of a /proc stat line after "pid (comm)":
// comm may hold spaces and parentheses, so they follow the last ')'.
func statFields(stat []byte) ([]string, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(stat[i+1:])), true
}
