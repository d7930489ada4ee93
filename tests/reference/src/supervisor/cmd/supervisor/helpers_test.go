package main

// What the tests share: short bounds for a peer that does not read, a
// socketpair as two *net.UnixConn, systemd's method calls faked (fakeCalls),
// a server without a system bus whose signals the tests send themselves, and
// a live session's relay driven from both ends (session).

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

const systemdOwner = ":1.1" // the unique name the tests' bus says owns org.freedesktop.systemd1

func TestMain(m *testing.M) {
	// set before any goroutine runs, never changed after
	writeTimeout = 400 * time.Millisecond
	writeSlice = 20 * time.Millisecond
	outputIdle = 300 * time.Millisecond
	os.Exit(m.Run())
}

// socketpair: two connected AF_UNIX stream sockets.
func socketpair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	a, b := conn(fds[0]), conn(fds[1])
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// fakeCalls is systemd as the session's method calls see it: a unit's
// ActiveState, "" when it is no longer loaded; stop makes it end (and says
// so in a signal, as systemd would) unless keepOnStop.
type fakeCalls struct {
	b          *bus
	mu         sync.Mutex
	state      map[string]string
	stops      []string
	keepOnStop bool
}

func newFakeCalls(b *bus) *fakeCalls { return &fakeCalls{b: b, state: map[string]string{}} }

func (f *fakeCalls) set(unit, state string) {
	f.mu.Lock()
	f.state[unit] = state
	f.mu.Unlock()
}

// end: the unit ends and is collected; systemd's signal says so.
func (f *fakeCalls) end(unit string) {
	f.set(unit, "")
	f.b.sigs <- propsSignal(systemdOwner, unit, unitIf, map[string]interface{}{"ActiveState": "inactive"})
}

func (f *fakeCalls) stop(unit string) error {
	f.mu.Lock()
	f.stops = append(f.stops, unit)
	keep := f.keepOnStop
	f.mu.Unlock()
	if !keep {
		f.end(unit)
	}
	return nil
}

func (f *fakeCalls) stopped() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.stops...)
}

func (f *fakeCalls) kill(unit string, signal int32) error { f.end(unit); return nil }

func (f *fakeCalls) unitGone(unit string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state[unit] == "", nil
}

func (f *fakeCalls) activeState(path dbus.ObjectPath) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for u, s := range f.state {
		if unitPath(u) == path && s != "" {
			return s, nil
		}
	}
	return "", dbus.Error{Name: "org.freedesktop.DBus.Error.UnknownObject"}
}

// propsSignal: a PropertiesChanged of interface iface on unit's object path, from sender.
func propsSignal(sender, unit, iface string, changed map[string]interface{}) *dbus.Signal {
	m := map[string]dbus.Variant{}
	for k, v := range changed {
		m[k] = dbus.MakeVariant(v)
	}
	return &dbus.Signal{Sender: sender, Path: unitPath(unit), Name: sigPropertiesChanged,
		Body: []interface{}{iface, m, []string{}}}
}

// testBus: a bus with no connection, whose owner of systemd's name is
// systemdOwner; its signals are handled in order until the test ends.
func testBus(t *testing.T) *bus {
	b := newBus()
	b.sdOwner = systemdOwner
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sig := range b.sigs {
			b.handle(sig)
		}
	}()
	t.Cleanup(func() { close(b.sigs); <-done })
	return b
}

func testServer(t *testing.T) (*server, *fakeCalls) {
	b := testBus(t)
	f := newFakeCalls(b)
	return &server{capacity: sessions, bus: b, calls: f, tokens: rateBurst, tokenT: time.Now(),
		conns: map[*conn]struct{}{}}, f
}

// session: a started session's relay, its slot taken, as conn.run runs it
// after handle(): the test is the peer (peer) and the session's command (cmd,
// the other end of the PTY socketpair).
type session struct {
	srv   *server
	f     *fakeCalls
	c     *conn
	st    *unitState
	peer  *net.UnixConn
	cmd   *net.UnixConn
	ended chan error // relay's result, once finish() has run
}

func startSession(t *testing.T, srv *server, f *fakeCalls) *session {
	t.Helper()
	mine, peer := socketpair(t)
	pty, cmd := socketpair(t)
	c := newConn(srv, mine)
	if !srv.takeSlot() {
		t.Fatal("no slot")
	}
	c.slot, c.pty, c.unitStarted = true, pty, true
	unit := unitPrefix + "0123456789abcdef0123456789abcdef" + unitSuffix
	c.st = newUnitState(unit)
	srv.bus.register(c.st)
	f.set(unit, "active")
	c.st.onJob("/org/freedesktop/systemd1/job/1", "done")
	s := &session{srv: srv, f: f, c: c, st: c.st, peer: peer, cmd: cmd, ended: make(chan error, 1)}
	go func() {
		err := c.relay()
		c.report(err)
		c.finish()
		s.ended <- err
	}()
	t.Cleanup(func() {
		// whatever the test did, the session ends before the next test
		f.end(unit)
		peer.Close()
		cmd.Close()
		select {
		case <-s.ended:
		case <-time.After(30 * time.Second):
			t.Error("the session's relay did not end within 30 s of its connection's close")
		}
	})
	return s
}

func (s *session) slots() int {
	s.srv.mu.Lock()
	defer s.srv.mu.Unlock()
	return s.srv.slots
}

// readFrame: the next frame the peer gets, within d.
func readFrame(c *net.UnixConn, d time.Duration) (byte, []byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return 0, nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:4]))
	if _, err := io.ReadFull(c, body); err != nil {
		return 0, nil, err
	}
	return hdr[4], body, nil
}

// waitFor polls cond every 5 ms until it holds or d has passed.
func waitFor(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
