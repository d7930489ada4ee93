package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// resizeSession applies a RESIZE: it opens the PTY through /proc/<pid>/fd/0
// of a session process that has a terminal there and sets its window size;
// the kernel sends SIGWINCH to the foreground process group. Needs
// CAP_SYS_PTRACE (another user's /proc fd links) and CAP_DAC_OVERRIDE (the
// pts is the user's, 0620). pidfd_getfd would need no device access, but
// systemd-nspawn's seccomp filter refuses it on the reference host. Best
// effort, never fatal.
func resizeSession(cgroup string, rows, cols uint16) bool {
	if cgroup == "" || rows == 0 || cols == 0 {
		return false
	}
	procs, err := os.ReadFile("/sys/fs/cgroup" + cgroup + "/cgroup.procs")
	if err != nil {
		return false
	}
	var errs []string
	for _, f := range strings.Fields(string(procs)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/fd/0", pid), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%d: %v", pid, err))
			continue
		}
		_, terr := unix.IoctlGetTermios(fd, unix.TCGETS)
		if terr == nil {
			err = unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
			unix.Close(fd)
			if err == nil {
				return true
			}
			errs = append(errs, fmt.Sprintf("%d: %v", pid, err))
			continue
		}
		unix.Close(fd)
	}
	logf("RESIZE: no process with a terminal in %s %v", cgroup, errs)
	return false
}
