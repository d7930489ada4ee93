// Command opencode-pty-supervisor is the root PTY supervisor of the reference
// deployment, written from TARGET-CONTRACT.md: it listens on
// /run/opencode-pty/supervisor.sock, authenticates the peer (SO_PEERCRED,
// SO_PEERPIDFD and the peer unit's properties over the system bus), starts one
// hardened transient session unit per connection through go-systemd's D-Bus
// client, relays the PTY stream and stops the unit when the connection ends.
//
// Fault switches: /etc/opencode-reference/faults, one word per line ('#'
// comments allowed), and OPENCODE_PTY_FAULTS, read once at start. The words
// are those of the Python implementation (src/supervisor-python), listed in
// faults.go.
package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

const (
	serviceUser  = "byk"
	serviceGroup = "byk"
	peerUnit     = "opencode-v2.service"
	peerCgroup   = "/system.slice/opencode-v2.service"
	selfUnit     = "opencode-pty-supervisor.service"
	sessionSlice = "opencode-pty.slice"
	launcher     = "/usr/local/libexec/opencode-pty-launcher"
	sockDir      = "/run/opencode-pty"
	sockPath     = sockDir + "/supervisor.sock"

	sessions     = 16
	dbusTimeout  = 5 * time.Second
	helloTimeout = 5 * time.Second
	startTimeout = 30 * time.Second
	unauthQuota  = 8 // concurrent unauthenticated connections
	rateBurst    = 32
	ratePerSec   = 16.0
)

// Bounds on a peer that does not read (variables: the tests shorten them).
var (
	// writeTimeout: a frame other than DATA, and DATA once the session is
	// over, is given up (and the peer with it) when the peer takes no byte of
	// it for this long; DATA of a running session waits (backpressure).
	writeTimeout = 5 * time.Second
	// writeSlice: how long one write(2) may block before the writer looks
	// again whether it should give up.
	writeSlice = 100 * time.Millisecond
	// outputIdle: once the unit has ended and its cgroup is gone, how long
	// the PTY may give nothing, with nothing of it waiting to be written,
	// before EXIT is sent without the end of its stream (conn.outputQuiet).
	outputIdle = 2 * time.Second
)

func logf(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "opencode-pty-supervisor: "+format+"\n", a...)
}

type server struct {
	uid, gid uint32
	home     string
	capacity int
	bus      *bus
	calls    unitCalls // s.bus: the method calls a session's unit needs

	mu          sync.Mutex
	slots       int
	unauth      int
	tokens      float64
	tokenT      time.Time
	lockedUntil time.Time
	conns       map[*conn]struct{}

	knownMainPID atomic.Int32
	stopping     atomic.Bool
	ln           *net.UnixListener
}

func newServer() (*server, error) {
	u, err := user.Lookup(serviceUser)
	if err != nil {
		return nil, err
	}
	g, err := user.LookupGroup(serviceGroup)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	home := u.HomeDir
	if home == "" {
		home = "/"
	}
	s := &server{uid: uint32(uid), gid: uint32(gid), home: home, capacity: sessions,
		tokens: rateBurst, tokenT: time.Now(), conns: map[*conn]struct{}{}}
	if fault("capacity17") {
		s.capacity = 17
	}
	if s.bus, err = openBus(); err != nil {
		return nil, err
	}
	s.calls = s.bus
	return s, nil
}

// admit decides on a new connection from pid (-1: unknown): bypass when it is
// the last authenticated MainPID, which skips the unauthenticated quota and
// rate (it is still fully authenticated), so a flood by other processes
// cannot lock the real peer out; otherwise why it is refused ("" when it
// took an unauthenticated place).
func (s *server) admit(pid int32) (bypass bool, why string) {
	if pid > 0 && pid == s.knownMainPID.Load() {
		return true, ""
	}
	return false, s.admitUnauth()
}

// admitUnauth takes a place for an unauthenticated connection; the reason it
// is refused otherwise.
func (s *server) admitUnauth() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fault("no-unauth-limit") {
		s.unauth++
		return ""
	}
	now := time.Now()
	burst := float64(rateBurst)
	if fault("unauth-rate-only") {
		burst = unauthQuota
	}
	s.tokens += now.Sub(s.tokenT).Seconds() * ratePerSec
	if s.tokens > burst {
		s.tokens = burst
	}
	s.tokenT = now
	if now.Before(s.lockedUntil) {
		return "locked out after a flood"
	}
	why := ""
	if s.unauth >= unauthQuota && !fault("unauth-rate-only") {
		why = "too many unauthenticated connections"
	} else if s.tokens < 1.0 {
		why = "connection rate limit"
	}
	if why != "" {
		if fault("lockout-after-flood") {
			s.lockedUntil = now.Add(60 * time.Second)
		}
		return why
	}
	s.tokens--
	s.unauth++
	return ""
}

func (s *server) releaseUnauth() {
	s.mu.Lock()
	s.unauth--
	s.mu.Unlock()
}

func (s *server) takeSlot() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slots >= s.capacity {
		return false
	}
	s.slots++
	return true
}

func (s *server) releaseSlot() {
	s.mu.Lock()
	s.slots--
	s.mu.Unlock()
}

func (s *server) listen() error {
	if err := os.MkdirAll(sockDir, 0o750); err != nil {
		return err
	}
	if err := os.Chown(sockDir, 0, int(s.gid)); err != nil {
		return err
	}
	if err := os.Chmod(sockDir, 0o750); err != nil {
		return err
	}
	if err := os.Remove(sockPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	old := syscall.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sockPath, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return err
	}
	ln.SetUnlinkOnClose(false) // shutdown unlinks it first
	if err := os.Chown(sockPath, 0, int(s.gid)); err != nil {
		return err
	}
	if err := os.Chmod(sockPath, 0o660); err != nil {
		return err
	}
	s.ln = ln
	return nil
}

func (s *server) serve() {
	for !s.stopping.Load() {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if s.stopping.Load() {
				return
			}
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOBUFS) ||
				errors.Is(err, unix.ENOMEM) {
				time.Sleep(50 * time.Millisecond)
			}
			continue
		}
		pid := int32(-1)
		if cred, err := peerCred(c); err == nil {
			pid = cred.Pid
		}
		bypass, why := s.admit(pid)
		if why != "" {
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = c.Write(encode(tError, append([]byte{0, eRate}, why...)))
			c.Close()
			continue
		}
		cn := newConn(s, c)
		cn.unauth = !bypass
		s.mu.Lock()
		s.conns[cn] = struct{}{}
		s.mu.Unlock()
		go cn.run()
	}
}

func (s *server) shutdown() {
	s.stopping.Store(true)
	_ = os.Remove(sockPath)
	s.ln.Close()
	s.mu.Lock()
	var conns []*conn
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.requestStop()
	}
	deadline := time.NewTimer(12 * time.Second)
	defer deadline.Stop()
	for _, c := range conns {
		select {
		case <-c.done:
		case <-deadline.C:
			return
		}
	}
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// soPeerPidfd is SO_PEERPIDFD (Linux 6.5), not yet in x/sys v0.3.0.
const soPeerPidfd = 77

func peerPidfd(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, gerr := -1, error(nil)
	if err := raw.Control(func(s uintptr) {
		fd, gerr = unix.GetsockoptInt(int(s), unix.SOL_SOCKET, soPeerPidfd)
	}); err != nil {
		return -1, err
	}
	if gerr != nil {
		return -1, gerr
	}
	return fd, nil
}

func main() {
	signal.Ignore(syscall.SIGHUP)
	readFaults()
	srv, err := newServer()
	if err != nil {
		logf("cannot start: %v", err)
		os.Exit(70)
	}
	srv.cleanupOrphans()
	if err := srv.listen(); err != nil {
		logf("cannot listen on %s: %v", sockPath, err)
		os.Exit(70)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		srv.shutdown()
		os.Exit(0)
	}()
	go func() {
		for range time.Tick(time.Second) {
			if !srv.bus.alive() {
				logf("system bus connection lost; exiting")
				os.Exit(70)
			}
		}
	}()
	if _, err := daemon.SdNotify(false, "READY=1\nSTATUS=listening on "+sockPath); err != nil {
		logf("sd_notify: %v", err)
	}
	logf("listening on %s capacity %d", sockPath, srv.capacity)
	srv.serve()
	select {}
}
