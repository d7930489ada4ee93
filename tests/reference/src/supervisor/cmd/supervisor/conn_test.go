package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// flood writes to the command's end of the PTY until it fails (the
// supervisor closed its end): a command that never stops writing.
func flood(c *net.UnixConn) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 65536)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	return &wg
}

// fill writes to the command's end of the PTY until a write would block
// for 200 ms (every buffer on the way is full); the bytes written.
func fill(t *testing.T, c *net.UnixConn) int {
	t.Helper()
	buf := make([]byte, 4096)
	total := 0
	for {
		_ = c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := c.Write(buf)
		total += n
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return total
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func exitOf(t *testing.T, payload []byte) (int32, int32) {
	t.Helper()
	if len(payload) != 8 {
		t.Fatalf("EXIT payload of %d bytes", len(payload))
	}
	return int32(binary.BigEndian.Uint32(payload[:4])), int32(binary.BigEndian.Uint32(payload[4:]))
}

// CONC-2: a command that filled every buffer and exited while the peer was
// not reading; the peer then reads (slowly): every byte arrives, then EXIT.
func TestEveryByteBeforeEXIT(t *testing.T) {
	everyByteBeforeEXIT(t, 100*time.Millisecond)
}

// The same with a peer that comes back after outputIdle (but within
// writeTimeout): the output still on its way is not given up for EXIT.
func TestEveryByteBeforeEXITAfterAPausePastOutputIdle(t *testing.T) {
	everyByteBeforeEXIT(t, (outputIdle+writeTimeout)/2)
}

func everyByteBeforeEXIT(t *testing.T, pause time.Duration) {
	setFaults()
	srv, f := testServer(t)
	s := startSession(t, srv, f)
	written := fill(t, s.cmd)
	s.cmd.Close()
	f.end(s.st.unit)
	if !waitFor(5*time.Second, func() bool { return s.slots() == 0 }) {
		t.Fatal("the unit is gone, its slot is still taken")
	}
	time.Sleep(pause) // the peer is slow to come back (less than writeTimeout)
	got := 0
	for {
		typ, body, err := readFrame(s.peer, 5*time.Second)
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", got, written, err)
		}
		if typ == tDataOut {
			got += len(body)
			time.Sleep(2 * time.Millisecond)
			continue
		}
		if typ != tExit {
			t.Fatalf("frame 0x%02x after %d bytes", typ, got)
		}
		if got != written {
			t.Fatalf("EXIT after %d of the %d bytes the command wrote", got, written)
		}
		if c, sig := exitOf(t, body); c != 0 || sig != 0 {
			t.Fatalf("EXIT (%d, %d)", c, sig)
		}
		return
	}
}

// A peer that stops reading while the command writes: the session runs on
// throttled (backpressure), however long the peer does not read.
func TestBackpressureIsWaitedForWhileTheSessionRuns(t *testing.T) {
	setFaults()
	srv, f := testServer(t)
	s := startSession(t, srv, f)
	flood(s.cmd)
	time.Sleep(3 * writeTimeout)
	select {
	case err := <-s.ended:
		t.Fatalf("a running session whose peer did not read for %v ended: %v", 3*writeTimeout, err)
	default:
	}
	if s.slots() != 1 {
		t.Fatal("slot freed while the session runs")
	}
	got := 0
	for got < 1<<20 {
		typ, body, err := readFrame(s.peer, 5*time.Second)
		if err != nil || typ != tDataOut {
			t.Fatalf("reading again after %d bytes: frame 0x%02x, %v", got, typ, err)
		}
		got += len(body)
	}
}

// A peer that stops reading holds up neither the end of its session nor its
// slot: once the unit is gone the slot is freed, and the connection ends
// within writeTimeout of the peer taking nothing.
func TestPeerThatStopsReadingWhenTheUnitEnds(t *testing.T) {
	setFaults()
	srv, f := testServer(t)
	s := startSession(t, srv, f)
	flood(s.cmd)
	time.Sleep(100 * time.Millisecond) // every buffer full, the writer blocked
	t0 := time.Now()
	f.end(s.st.unit)
	if !waitFor(5*time.Second, func() bool { return s.slots() == 0 }) {
		t.Fatal("the unit is gone, its slot is still taken 5 s later")
	}
	select {
	case err := <-s.ended:
		if !errors.Is(err, errPeerGone) {
			t.Fatalf("relay ended with %v, want errPeerGone", err)
		}
		s.ended <- err
	case <-time.After(writeTimeout + 5*time.Second):
		t.Fatalf("the connection of a peer that does not read was still held %v after its unit ended",
			time.Since(t0))
	}
	select {
	case <-s.c.done:
	default:
		t.Fatal("finish() did not complete")
	}
}

// A protocol error while the peer does not read: the unit is stopped, ERROR
// is given up after its bound, the connection ends and the slot is freed.
func TestProtocolErrorWhileThePeerDoesNotRead(t *testing.T) {
	setFaults()
	srv, f := testServer(t)
	s := startSession(t, srv, f)
	flood(s.cmd)
	time.Sleep(100 * time.Millisecond)
	if _, err := s.peer.Write(hdr(0, 0x7f)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.ended:
		if rejectCode(err) != eProtocol {
			t.Fatalf("relay ended with %v, want PROTOCOL", err)
		}
		s.ended <- err
	case <-time.After(writeTimeout + 5*time.Second):
		t.Fatal("a protocol error of a peer that does not read held the connection")
	}
	if st := f.stopped(); len(st) == 0 || st[0] != s.st.unit {
		t.Fatalf("the unit was not stopped: %v", st)
	}
	if s.slots() != 0 {
		t.Fatal("the slot is still taken after the unit was stopped")
	}
}

// CONC-2: a forged PropertiesChanged saying the unit ended: no EXIT, the
// session goes on, its slot stays taken. Each of the two checks (the sender,
// the confirming method call) is enough; with both off (the catalogue's
// fault) the forgery ends the session.
func TestForgedEndIsNotBelieved(t *testing.T) {
	forged := func(s *session) {
		s.srv.bus.sigs <- propsSignal(forger, s.st.unit, serviceIf, map[string]interface{}{
			"ExecMainCode": int32(1), "ExecMainStatus": int32(0), "Result": "success"})
		s.srv.bus.sigs <- inactiveOf(forger, s.st.unit)
		s.srv.bus.sigs <- &dbus.Signal{Sender: forger, Path: sdPath, Name: sigJobRemoved,
			Body: []interface{}{uint32(1), dbus.ObjectPath("/org/freedesktop/systemd1/job/1"), s.st.unit, "done"}}
	}
	for _, words := range [][]string{nil, {"no-signal-sender-check"}, {"no-end-confirmation"}} {
		t.Run(fmtWords(words), func(t *testing.T) {
			setFaults(words...)
			defer setFaults()
			srv, f := testServer(t)
			s := startSession(t, srv, f)
			forged(s)
			if typ, _, err := readFrame(s.peer, 4*outputIdle); err == nil {
				t.Fatalf("after the forgery the peer got frame 0x%02x", typ)
			}
			if s.slots() != 1 {
				t.Fatal("the forgery freed the slot")
			}
			if _, err := s.cmd.Write([]byte("still here")); err != nil {
				t.Fatal(err)
			}
			typ, body, err := readFrame(s.peer, 5*time.Second)
			if err != nil || typ != tDataOut || string(body) != "still here" {
				t.Fatalf("the session no longer relays: 0x%02x %q %v", typ, body, err)
			}
			if st := f.stopped(); len(st) != 0 {
				t.Fatalf("the forgery stopped the unit: %v", st)
			}
		})
	}
	t.Run("both checks off", func(t *testing.T) {
		setFaults("no-signal-sender-check", "no-end-confirmation")
		defer setFaults()
		srv, f := testServer(t)
		s := startSession(t, srv, f)
		forged(s)
		typ, _, err := readFrame(s.peer, 5*outputIdle+5*time.Second)
		if err != nil || typ != tExit {
			t.Fatalf("with both checks off the forgery should end the session with EXIT: 0x%02x %v", typ, err)
		}
	})
}

func inactiveOf(sender, unit string) *dbus.Signal {
	return propsSignal(sender, unit, unitIf, map[string]interface{}{"ActiveState": "inactive", "SubState": "dead"})
}

func fmtWords(words []string) string {
	if len(words) == 0 {
		return "both checks on"
	}
	return words[0]
}

// systemd goes on signalling while the session ends (its last properties,
// late ones): the end is reported without a data race (go test -race; the
// race window is short, so many sessions end).
func TestSessionEndsWhileSignalsArrive(t *testing.T) {
	setFaults()
	for i := 0; i < 100; i++ {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			srv, f := testServer(t)
			s := startSession(t, srv, f)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := 0; g < 2; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := int32(0); ; i++ {
						select {
						case <-stop:
							return
						case srv.bus.sigs <- propsSignal(systemdOwner, s.st.unit, serviceIf, map[string]interface{}{
							"ExecMainCode": int32(1), "ExecMainStatus": i % 2, "Result": "success"}):
						}
					}
				}()
			}
			defer func() { close(stop); wg.Wait() }()
			s.cmd.Close()
			f.end(s.st.unit)
			typ, _, err := readFrame(s.peer, 10*time.Second)
			if err != nil || typ != tExit {
				t.Fatalf("want EXIT, got 0x%02x %v", typ, err)
			}
		})
	}
}
