// Command opencode-pty-supervisor is the root PTY supervisor of the
// reference deployment.
//
// Debian bookworm has no Go D-Bus library, so the supervisor logic lives in
// supervisor.py (Python 3 + python3-jeepney), embedded in this binary. The
// binary stays the service's MainPID: it writes the embedded source to a
// sealed memfd, runs "/usr/bin/python3 -I /proc/self/fd/3" as its only child
// with a fixed environment, forwards SIGTERM/SIGINT/SIGHUP to it and exits
// with the child's status.
package main

import (
	_ "embed"
	"os"
	"os/signal"
	"syscall"
	"unsafe"
)

//go:embed supervisor.py
var source []byte

const (
	python          = "/usr/bin/python3"
	sysMemfdCreate  = 319 // amd64
	mfdAllowSealing = 0x2
	fAddSeals       = 1033
	sealAll         = 0x1 | 0x2 | 0x4 | 0x8 // SEAL, SHRINK, GROW, WRITE
)

func fail(msg string) {
	os.Stderr.WriteString("opencode-pty-supervisor: " + msg + "\n")
	os.Exit(70)
}

func memfd() int {
	name := []byte("opencode-pty-supervisor.py\x00")
	fd, _, errno := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(&name[0])), mfdAllowSealing, 0)
	if errno != 0 {
		fail("memfd_create: " + errno.Error())
	}
	b := source
	for len(b) > 0 {
		n, err := syscall.Write(int(fd), b)
		if err != nil {
			fail("write memfd: " + err.Error())
		}
		b = b[n:]
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, fAddSeals, sealAll); errno != 0 {
		fail("seal memfd: " + errno.Error())
	}
	return int(fd)
}

func main() {
	fd := memfd()
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	for _, k := range []string{"NOTIFY_SOCKET", "INVOCATION_ID", "OPENCODE_PTY_FAULTS"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	f := os.NewFile(uintptr(fd), "supervisor.py")
	p, err := os.StartProcess(python, []string{python, "-I", "/proc/self/fd/3"}, &os.ProcAttr{
		Dir:   "/",
		Env:   env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, f},
	})
	if err != nil {
		fail("start " + python + ": " + err.Error())
	}
	f.Close()
	go func() {
		for s := range sigs {
			p.Signal(s)
		}
	}()
	st, err := p.Wait()
	if err != nil {
		fail("wait: " + err.Error())
	}
	ws := st.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		os.Exit(128 + int(ws.Signal()))
	}
	os.Exit(ws.ExitStatus())
}
