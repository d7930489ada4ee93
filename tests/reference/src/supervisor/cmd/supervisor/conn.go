package main

// One connection: HELLO and authentication, one START, the session unit, the
// PTY stream both ways, EXIT when the unit has ended and is gone; the unit is
// stopped when the connection ends first (TARGET-CONTRACT section 3).

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

type conn struct {
	srv    *server
	sock   *net.UnixConn
	reader *frameReader
	done   chan struct{}
	stopCh chan struct{}

	stopRequested atomic.Bool
	inRelay       atomic.Bool
	dropOutput    atomic.Bool // fault exit-without-flush: output not yet written is dropped
	outPending    atomic.Int64 // PTY reads not yet written to the peer (or dropped)
	lastRead      atomic.Int64 // UnixNano of the last PTY read that returned bytes
	unauth        bool
	slot          bool
	pidfd         int
	heldFds       []int // descriptors received with the current frame, closed unless handed over
	st            *unitState
	cgroup        string
	pty           *net.UnixConn
	unitStarted   bool
	w             *writer // every frame to the peer
}

func newConn(s *server, c *net.UnixConn) *conn {
	return &conn{srv: s, sock: c, reader: &frameReader{c: c}, done: make(chan struct{}),
		stopCh: make(chan struct{}, 1), pidfd: -1, w: newWriter(c)}
}

// frame kinds, for the writer
const (
	kindControl = iota // HELLO_OK, STARTED, ERROR: the peer must take it within its bound
	kindData           // DATA: waited for while the session runs (backpressure)
	kindExit           // EXIT: the last frame; DATA after it is dropped
)

// writer is the one way frames reach the peer: whole, one at a time, each
// write(2) bounded by writeSlice. DATA waits for a peer that does not read as
// long as the session runs (backpressure); any other frame, and DATA once the
// session is over, gives the peer up when it takes no byte for its bound: the
// frame is abandoned, every writer returns errPeerGone and the connection
// ends. So a peer that stops reading holds up neither ERROR, EXIT nor the end
// of its connection, and never its slot once the unit is gone.
type writer struct {
	sock     *net.UnixConn
	turn     chan struct{} // holds a token while a frame is written
	dead     chan struct{} // closed when the peer is given up
	deadOnce sync.Once
	over     atomic.Bool  // the session is over: DATA is no longer waited for
	progress atomic.Int64 // UnixNano of the last byte the peer took (or of the session's end)
	exitSent bool         // under the turn
}

func newWriter(c *net.UnixConn) *writer {
	return &writer{sock: c, turn: make(chan struct{}, 1), dead: make(chan struct{})}
}

func (w *writer) giveUp() { w.deadOnce.Do(func() { close(w.dead) }) }

// sessionOver: from now on DATA the peer does not take is not waited for.
func (w *writer) sessionOver() {
	w.progress.Store(time.Now().UnixNano())
	w.over.Store(true)
}

// lastOutput: when the peer last took a byte (or the session ended, if later).
func (w *writer) lastOutput() time.Time { return time.Unix(0, w.progress.Load()) }

func (w *writer) patient(kind int) bool { return kind == kindData && !w.over.Load() }

// acquire the turn; while another frame holds it, wait as long as that frame
// makes progress (or forever, for patient DATA).
func (w *writer) acquire(kind int, bound time.Duration) error {
	t := time.NewTimer(bound)
	defer t.Stop()
	for {
		select {
		case w.turn <- struct{}{}:
			return nil
		case <-w.dead:
			return errPeerGone
		case <-t.C:
			if w.patient(kind) || time.Since(w.lastOutput()) < bound {
				t.Reset(bound)
				continue
			}
			w.giveUp()
			return errPeerGone
		}
	}
}

// write sends frame b whole, or gives the peer up (errPeerGone).
func (w *writer) write(b []byte, kind int, bound time.Duration) error {
	if err := w.acquire(kind, bound); err != nil {
		return err
	}
	defer func() { <-w.turn }()
	if w.exitSent {
		return nil // nothing follows EXIT
	}
	last := time.Now()
	for len(b) > 0 {
		select {
		case <-w.dead:
			return errPeerGone
		default:
		}
		_ = w.sock.SetWriteDeadline(time.Now().Add(writeSlice))
		n, err := w.sock.Write(b)
		if n > 0 {
			b = b[n:]
			last = time.Now()
			w.progress.Store(last.UnixNano())
		}
		if err == nil {
			continue
		}
		// a peer that takes nothing for `bound`: since this frame's last byte, and since the
		// session's end (sessionOver) for DATA that was waited for until then
		if last.Before(w.lastOutput()) {
			last = w.lastOutput()
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || (!w.patient(kind) && time.Since(last) >= bound) {
			w.giveUp()
			return errPeerGone
		}
	}
	if kind == kindExit {
		w.exitSent = true
	}
	return nil
}

// requestStop (supervisor shutdown): the session is stopped and reported.
func (c *conn) requestStop() {
	c.stopRequested.Store(true)
	select {
	case c.stopCh <- struct{}{}:
	default:
	}
	if !c.inRelay.Load() {
		_ = c.sock.SetReadDeadline(time.Now())
	}
}

// sendNow: a frame other than DATA and EXIT, which the peer must take
// within timeout.
func (c *conn) sendNow(b []byte, timeout time.Duration) error {
	return c.w.write(b, kindControl, timeout)
}

func (c *conn) sendError(code uint16, msg string) {
	if len(msg) > 1000 {
		msg = strings.ToValidUTF8(msg[:1000], "")
	}
	p := make([]byte, 2, 2+len(msg))
	binary.BigEndian.PutUint16(p, code)
	_ = c.sendNow(encode(tError, append(p, msg...)), time.Second)
}

func (c *conn) closeFds() {
	for _, fd := range c.heldFds {
		unix.Close(fd)
	}
	c.heldFds = nil
}

func (c *conn) run() {
	defer c.finish()
	defer func() {
		if p := recover(); p != nil {
			logf("internal error: %v", p)
			c.sendError(eInternal, "internal error")
		}
	}()
	c.report(c.handle())
}

// report how the connection's handling ended: a reject or an internal error
// as ERROR, nothing when the peer went away or the session ended.
func (c *conn) report(err error) {
	var r *reject
	switch {
	case err == nil, errors.Is(err, errPeerGone), errors.Is(err, io.EOF):
	case errors.As(err, &r):
		logf("reject %d %s", r.code, r.msg)
		c.sendError(r.code, r.msg)
	default:
		logf("internal error: %v", err)
		c.sendError(eInternal, "internal error")
	}
}

// readFrame: the next frame within d; a timeout is a PROTOCOL error.
func (c *conn) readFrame(d time.Duration) (*frame, error) {
	_ = c.sock.SetReadDeadline(time.Now().Add(d))
	if c.stopRequested.Load() {
		return nil, rejectf(eProtocol, "timed out waiting for a frame")
	}
	f, err := c.reader.read()
	if err != nil {
		c.heldFds = append(c.heldFds, c.reader.fds...)
		c.reader.fds = nil
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, rejectf(eProtocol, "timed out waiting for a frame")
		}
		return nil, err
	}
	return f, nil
}

func (c *conn) handle() error {
	srv := c.srv
	cred, err := peerCred(c.sock)
	if err != nil {
		return fmt.Errorf("SO_PEERCRED: %w", err)
	}
	if c.pidfd, err = peerPidfd(c.sock); err != nil {
		c.pidfd = -1
		if !fault("allow-no-pidfd") {
			return rejectf(eAuth, "SO_PEERPIDFD unavailable (%v)", err)
		}
	}
	f, err := c.readFrame(helloTimeout)
	if err != nil {
		return err
	}
	if len(f.fds) > 0 || f.ctrunc {
		c.heldFds = f.fds
		return rejectf(eProtocol, "descriptors on a non-START frame")
	}
	if f.typ != tHello {
		return rejectf(eProtocol, "first frame must be HELLO")
	}
	p, err := srv.authenticate(cred.Pid, cred.Uid, cred.Gid, c.pidfd)
	if err != nil {
		return err
	}
	if c.unauth {
		srv.releaseUnauth()
		c.unauth = false
	}
	if !srv.takeSlot() {
		return rejectf(eCapacity, "all %d session slots are in use", srv.capacity)
	}
	c.slot = true
	if err := c.sendNow(encode(tHelloOK, p.inv), writeTimeout); err != nil {
		return err
	}

	f, err = c.readFrame(startTimeout)
	if err != nil {
		return err
	}
	c.heldFds = f.fds // closed in finish() unless handed over
	if f.typ != tStart {
		return rejectf(eProtocol, "expected START, got type 0x%02x", f.typ)
	}
	if f.ctrunc {
		return rejectf(eProtocol, "START control message truncated (MSG_CTRUNC)")
	}
	if len(f.fds) != 1 {
		return rejectf(eProtocol, "START must carry exactly one descriptor, got %d", len(f.fds))
	}
	req, err := parseStart(f.payload)
	if err != nil {
		return err
	}
	cwdFd := f.fds[0]
	var st unix.Stat_t
	if err := unix.Fstat(cwdFd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return rejectf(eProtocol, "START descriptor is not a directory")
	}
	if err := srv.recheck(p); err != nil {
		return err
	}
	if err := c.startUnit(req, cwdFd); err != nil {
		return err
	}
	c.closeFds()
	_ = c.sock.SetReadDeadline(time.Time{})
	return c.relay()
}

func (c *conn) startUnit(req *startRequest, cwdFd int) error {
	srv := c.srv
	rnd := make([]byte, 16)
	if _, err := rand.Read(rnd); err != nil {
		return err
	}
	unit := "opencode-pty-" + hex.EncodeToString(rnd) + ".service"
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	mine := os.NewFile(uintptr(pair[0]), "pty")
	fc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		unix.Close(pair[1])
		return err
	}
	c.pty = fc.(*net.UnixConn)
	st := newUnitState(unit)
	c.st = st
	srv.bus.register(st)
	props := srv.unitProps(unit, req.argv, req.runtime, pair[1], cwdFd, req.rows, req.cols)
	ctx, cancel := ctx5()
	// no job channel: go-systemd's takes JobRemoved from any sender; the
	// result comes from our own, sender-checked JobRemoved (st.startJob)
	_, err = srv.bus.sd.StartTransientUnitContext(ctx, unit, "fail", props, nil)
	cancel()
	unix.Close(pair[1])
	c.unitStarted = true // maybe nothing was created; stop anyway in case it was
	if err != nil {
		if name := errName(err); name != "" {
			return rejectf(eStartFailed, "StartTransientUnit failed: %s %v", name, err)
		}
		if timedOut(err) {
			return rejectf(eStartFailed, "StartTransientUnit deadline exceeded")
		}
		return rejectf(eStartFailed, "StartTransientUnit failed: %v", err)
	}
	deadline := time.Now().Add(dbusTimeout)
	for res := st.startJob(); res != "done"; res = st.startJob() {
		if res != "" {
			return rejectf(eStartFailed, "start job result: %s", res)
		}
		if !time.Now().Before(deadline) {
			return rejectf(eStartFailed, "start job did not finish in time")
		}
		st.waitChange(time.Until(deadline))
	}
	v, err := srv.bus.get(st.path, serviceIf, "ControlGroup")
	switch {
	case err == nil:
		if c.cgroup, err = as[string](v, "ControlGroup"); err != nil {
			return rejectf(eStartFailed, "%s: %v", unit, err)
		}
	case timedOut(err):
		return rejectf(eStartFailed, "D-Bus deadline exceeded after start")
	default:
		c.cgroup = "" // already ended and collected
	}
	logf("started %s for %d argv elements, runtime %d", unit, len(req.argv), req.runtime)
	return c.sendNow(encode(tStarted, []byte(unit)), writeTimeout)
}

// inbound is how the reader of the peer's frames ended.
type inbound struct {
	err error
	fds []int
}

// pumpIn relays the helper's frames after START: DATA to the PTY, EOF as the
// end of its input, RESIZE, STOP. It returns at the end of the stream (the
// peer went away) or at a protocol error.
func (c *conn) pumpIn(stop chan<- struct{}) inbound {
	inputEOF := false
	ptyClosed := false
	for {
		f, err := c.reader.read()
		if err != nil {
			fds := c.reader.fds
			c.reader.fds = nil
			return inbound{err, fds}
		}
		if len(f.fds) > 0 || f.ctrunc {
			return inbound{rejectf(eProtocol, "descriptors on a non-START frame"), f.fds}
		}
		switch f.typ {
		case tData:
			if inputEOF {
				return inbound{rejectf(eProtocol, "DATA after EOF"), nil}
			}
			if !ptyClosed && len(f.payload) > 0 {
				if _, err := c.pty.Write(f.payload); err != nil {
					ptyClosed = true
				}
			}
		case tEOF:
			if !inputEOF && !ptyClosed {
				_ = c.pty.CloseWrite()
			}
			inputEOF = true
		case tResize:
			resizeSession(c.cgroup, binary.BigEndian.Uint16(f.payload[0:2]), binary.BigEndian.Uint16(f.payload[2:4]))
		case tStop:
			select {
			case stop <- struct{}{}:
			default:
			}
		default:
			return inbound{rejectf(eProtocol, "unexpected frame type 0x%02x after START", f.typ), nil}
		}
	}
}

// pumpOut relays PTY output to the peer as DATA frames; closes eof at the end
// of the PTY stream, gone when the peer can no longer be written to.
func (c *conn) pumpOut(eof, gone chan<- struct{}) {
	out := make(chan []byte, 8)
	if fault("unbounded-output") {
		out = make(chan []byte, 1<<20)
	}
	go func() {
		defer close(out)
		for {
			buf := make([]byte, maxData)
			n, err := c.pty.Read(buf)
			if n > 0 {
				c.lastRead.Store(time.Now().UnixNano())
				c.outPending.Add(1) // before it is queued: relay() sees it pending from now on
				out <- buf[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	failed := false
	for b := range out {
		if !failed && !c.dropOutput.Load() {
			if err := c.w.write(encode(tDataOut, b), kindData, writeTimeout); err != nil {
				failed = true
				close(gone)
			}
		}
		c.outPending.Add(-1)
	}
	close(eof)
}

// outputQuiet: nothing read from the PTY waits to be written, and the PTY
// has given nothing for outputIdle since `since` (the session's end) and
// since its last read: its end is not coming (a process outside the unit
// holds the other end of the stream), so EXIT goes without it. Output still
// on its way to a slow peer is never given up for EXIT: every byte comes
// first (CONC-2), or the peer is given up after writeTimeout.
func (c *conn) outputQuiet(since time.Time) bool {
	last := time.Unix(0, c.lastRead.Load())
	if last.Before(since) {
		last = since
	}
	return c.outPending.Load() == 0 && time.Since(last) > outputIdle
}

func (c *conn) relay() error {
	srv, st := c.srv, c.st
	c.inRelay.Store(true)
	stopFrames := make(chan struct{}, 1)
	in := make(chan inbound, 1)
	go func() { in <- c.pumpIn(stopFrames) }()
	ptyEOF := make(chan struct{})
	peerGone := make(chan struct{})
	go c.pumpOut(ptyEOF, peerGone)

	stopSent := false
	stopUnit := func() {
		if stopSent {
			return
		}
		stopSent = true
		st.markStopRequested()
		srv.stopUnit(st.unit)
	}
	eofSeen, over := false, false
	var lastProbe, overAt time.Time
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	eofCh := (<-chan struct{})(ptyEOF)
	for {
		if c.stopRequested.Load() {
			stopUnit()
		}
		if st.isEnded() && fault("exit-without-flush") && !c.dropOutput.Load() {
			logf("fault: dropping the output not yet written for %s", st.unit)
			c.dropOutput.Store(true)
			eofSeen = true // EXIT at once
		}
		now := time.Now()
		// what the signals say, and the end of the PTY stream, are hints:
		// systemd is asked (also: the unit may have been collected with
		// coalesced signals)
		if !st.isEnded() && (eofSeen || st.endHinted()) && now.Sub(lastProbe) > 200*time.Millisecond {
			lastProbe = now
			if confirmEnd(srv.calls, st) {
				continue
			}
		}
		if st.isEnded() && !over {
			// the unit has ended: make sure everything is gone and free the
			// slot; from now on a peer that does not read is not waited for
			over = true
			ok := srv.waitGone(st, c.cgroup, time.Now().Add(5*time.Second))
			c.unitStarted = !ok
			if ok && c.slot {
				srv.releaseSlot()
				c.slot = false
			}
			c.w.sessionOver()
			overAt = time.Now()
		}
		if over && (eofSeen || c.outputQuiet(overAt)) {
			// every byte of output relayed (and none for outputIdle, without its end): report
			if !srv.bus.sync(dbusTimeout) {
				logf("signal dispatch did not drain in time; EXIT may be stale %s", st.unit)
			}
			code, sig, err := st.exitPair()
			if err != nil {
				return rejectf(eInternal, "%s: %v", st.unit, err)
			}
			logf("ended %s %s -> %d %d", st.unit, st.summary(), code, sig)
			p := make([]byte, 8)
			binary.BigEndian.PutUint32(p[0:4], uint32(code))
			binary.BigEndian.PutUint32(p[4:8], uint32(sig))
			return c.w.write(encode(tExit, p), kindExit, writeTimeout)
		}
		select {
		case <-st.changed:
		case <-eofCh:
			eofSeen = true
			eofCh = nil
		case r := <-in:
			c.heldFds = append(c.heldFds, r.fds...)
			var rj *reject
			if errors.As(r.err, &rj) {
				stopUnit()
				return rj
			}
			return errPeerGone // the peer closed the connection: finish() stops the unit
		case <-peerGone:
			return errPeerGone
		case <-stopFrames:
			stopUnit()
		case <-c.stopCh:
			stopUnit()
		case <-tick.C:
		}
	}
}

func (c *conn) finish() {
	srv := c.srv
	c.closeFds() // in finish: nothing received outlives its connection
	if c.st != nil && c.unitStarted {
		if fault("no-stop-on-disconnect") && !srv.stopping.Load() {
			logf("fault: leaving %s running after disconnect", c.st.unit)
		} else if !srv.stopAndWait(c.st, c.cgroup, 20*time.Second) {
			c.slot = false // fail closed: the slot stays taken
		}
	}
	if c.st != nil {
		srv.bus.unregister(c.st)
	}
	c.sock.Close()
	if c.pty != nil {
		c.pty.Close()
	}
	if c.pidfd >= 0 {
		unix.Close(c.pidfd)
	}
	if c.unauth {
		srv.releaseUnauth()
	}
	if c.slot {
		srv.releaseSlot()
	}
	srv.mu.Lock()
	delete(srv.conns, c)
	srv.mu.Unlock()
	close(c.done)
}
