// Command opencode-pty-launcher is the ExecStart of every PTY session unit
// (reference deployment).
//
// Outer run (started by systemd): stdin/stdout are the PTY stream socket and
// stderr is the approved working-directory descriptor. Every argument must be
// "a" followed by canonical unpadded URL-safe base64 of one original argv
// element. The launcher fchdir(2)s to fd 2, replaces fd 2 with fd 1, clears
// the environment, binds its own executable to fd 3 (inheritable), puts the
// encoded argv in one temporary environment value and execs
//
//	/usr/bin/script -q -e -f -c "/bin/sh -i -c 'exec /proc/self/fd/3 --exec'" /dev/null
//
// Inner run ("--exec", inside the PTY): decode argv from the temporary value,
// drop it, set the fixed environment, close fd 3 and execve the command.
//
// Window size: the supervisor puts the START frame's size into the unit's
// environment as OPENCODE_PTY_WINSIZE=<rows>x<cols>. The outer run carries it
// (validated) as a leading "s<rows>x<cols>" token of the temporary value, and
// the inner run applies it to the PTY (TIOCSWINSZ on fd 0) before execve, so
// the command sees its size from its first instruction. Later RESIZE frames
// are applied by the supervisor itself.
package main

import (
	"encoding/base64"
	"errors"
	"os"
	"os/user"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

const (
	winsizeEnv = "OPENCODE_PTY_WINSIZE"
	argvEnv    = "OPENCODE_PTY_LAUNCH_ARGV"
	scriptPath = "/usr/bin/script"
	innerShell = "/bin/sh -i -c 'exec /proc/self/fd/3 --exec'"
	fixedPath  = "/usr/local/bin:/usr/bin:/bin"
)

var (
	argPattern  = regexp.MustCompile(`^a[A-Za-z0-9_-]*$`)
	sizePattern = regexp.MustCompile(`^([1-9][0-9]{0,4})x([1-9][0-9]{0,4})$`)
)

// parseSize returns rows and cols of "<rows>x<cols>" (each 1..65535).
func parseSize(s string) (uint16, uint16, bool) {
	m := sizePattern.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, false
	}
	r, err1 := strconv.ParseUint(m[1], 10, 16)
	c, err2 := strconv.ParseUint(m[2], 10, 16)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uint16(r), uint16(c), true
}

func setWinsize(fd int, rows, cols uint16) {
	ws := [4]uint16{rows, cols, 0, 0}
	syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCSWINSZ, uintptr(unsafe.Pointer(&ws[0])))
}

// decodeArg returns the original argument for one encoded element.
func decodeArg(s string) (string, error) {
	if !argPattern.MatchString(s) {
		return "", errors.New("argument is not a[A-Za-z0-9_-]*")
	}
	raw, err := base64.RawURLEncoding.DecodeString(s[1:])
	if err != nil {
		return "", errors.New("argument is not base64url")
	}
	if base64.RawURLEncoding.EncodeToString(raw) != s[1:] {
		return "", errors.New("argument is not canonical base64url")
	}
	return string(raw), nil
}

// decodeAll validates and decodes every encoded element.
func decodeAll(args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, errors.New("no command")
	}
	out := make([]string, 0, len(args))
	for i, a := range args {
		d, err := decodeArg(a)
		if err != nil {
			return nil, errors.New("argument " + strconv.Itoa(i+1) + ": " + err.Error())
		}
		out = append(out, d)
	}
	if out[0] == "" {
		return nil, errors.New("empty command")
	}
	return out, nil
}

func writeAll(fd int, msg string) {
	b := []byte(msg)
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		b = b[n:]
	}
}

func fail(fd int, code int, msg string) {
	writeAll(fd, "opencode-pty-launcher: "+msg+"\n")
	os.Exit(code)
}

func outer(args []string) {
	if _, err := decodeAll(args); err != nil {
		fail(1, 2, err.Error())
	}
	if err := syscall.Fchdir(2); err != nil {
		fail(1, 2, "fchdir(2): "+err.Error())
	}
	if err := syscall.Dup2(1, 2); err != nil {
		fail(1, 2, "dup2(1, 2): "+err.Error())
	}
	size := ""
	if v, ok := os.LookupEnv(winsizeEnv); ok {
		if _, _, ok := parseSize(v); ok {
			size = "s" + v + " "
		}
	}
	os.Clearenv()
	fd, err := syscall.Open("/proc/self/exe", syscall.O_RDONLY, 0)
	if err != nil {
		fail(1, 2, "open /proc/self/exe: "+err.Error())
	}
	if fd != 3 {
		if err := syscall.Dup2(fd, 3); err != nil {
			fail(1, 2, "dup2(exe, 3): "+err.Error())
		}
		syscall.Close(fd)
	}
	env := []string{argvEnv + "=" + size + strings.Join(args, " ")}
	argv := []string{"script", "-q", "-e", "-f", "-c", innerShell, "/dev/null"}
	err = syscall.Exec(scriptPath, argv, env)
	fail(1, 2, "exec "+scriptPath+": "+err.Error())
}

func homeDir() string {
	u, err := user.LookupId(strconv.Itoa(os.Getuid()))
	if err != nil || u.HomeDir == "" {
		return "/"
	}
	return u.HomeDir
}

func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range strings.Split(fixedPath, ":") {
		p := dir + "/" + name
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG && st.Mode&0111 != 0 {
			return p, nil
		}
	}
	return "", errors.New(name + ": command not found")
}

func inner() {
	encoded, ok := os.LookupEnv(argvEnv)
	if !ok {
		fail(2, 2, "--exec without launch arguments")
	}
	os.Unsetenv(argvEnv)
	tokens := strings.Split(encoded, " ")
	if len(tokens) > 0 && strings.HasPrefix(tokens[0], "s") {
		if r, c, ok := parseSize(tokens[0][1:]); ok {
			setWinsize(0, r, c)
		}
		tokens = tokens[1:]
	}
	argv, err := decodeAll(tokens)
	if err != nil {
		fail(2, 2, err.Error())
	}
	env := []string{
		"PATH=" + fixedPath,
		"HOME=" + homeDir(),
		"TERM=xterm-256color",
		"LANG=C.UTF-8",
	}
	os.Clearenv()
	syscall.Close(3)
	path, err := lookPath(argv[0])
	if err != nil {
		fail(2, 127, err.Error())
	}
	err = syscall.Exec(path, argv, env)
	code := 126
	if err == syscall.ENOENT {
		code = 127
	}
	fail(2, code, argv[0]+": "+err.Error())
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--exec" {
		inner()
		return
	}
	outer(os.Args[1:])
}
