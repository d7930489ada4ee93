package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func hdr(n uint32, t byte) []byte {
	b := make([]byte, 5)
	binary.BigEndian.PutUint32(b, n)
	b[4] = t
	return b
}

func frameOf(t byte, payload []byte) []byte { return append(hdr(uint32(len(payload)), t), payload...) }

func rejectCode(err error) uint16 {
	var r *reject
	if errors.As(err, &r) {
		return r.code
	}
	return 0
}

// The reader's verdict on a frame header: the bounds are the contract's,
// checked before a byte of the payload is read.
func TestFrameHeaderBounds(t *testing.T) {
	cases := []struct {
		name string
		hdr  []byte
		ok   bool
	}{
		{"HELLO empty", hdr(0, tHello), true},
		{"HELLO with a byte", hdr(1, tHello), false},
		{"EOF with a byte", hdr(1, tEOF), false},
		{"STOP with a byte", hdr(1, tStop), false},
		{"START at its lower bound", hdr(10, tStart), true},
		{"START one below", hdr(9, tStart), false},
		{"START at the contract's bound 70158", hdr(70158, tStart), true},
		{"START one past", hdr(70159, tStart), false},
		{"DATA empty", hdr(0, tData), true},
		{"DATA at 32768", hdr(maxData, tData), true},
		{"DATA one past", hdr(maxData+1, tData), false},
		{"DATA of 4 GiB - 1", hdr(0xFFFFFFFF, tData), false},
		{"RESIZE of 4", hdr(4, tResize), true},
		{"RESIZE of 3", hdr(3, tResize), false},
		{"RESIZE of 5", hdr(5, tResize), false},
		{"unknown type 0x00", hdr(0, 0x00), false},
		{"unknown type 0x07", hdr(0, 0x07), false},
		{"unknown type 0x7f", hdr(0, 0x7f), false},
		{"HELLO_OK from the peer", hdr(16, tHelloOK), false},
		{"EXIT from the peer", hdr(8, tExit), false},
	}
	if startBound != 70158 {
		t.Fatalf("startBound %d, the contract's is 70158", startBound)
	}
	for _, tc := range cases {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			a, b := socketpair(t)
			n := binary.BigEndian.Uint32(tc.hdr[:4])
			go func() {
				_, _ = b.Write(tc.hdr)
				if tc.ok {
					_, _ = b.Write(make([]byte, n))
				}
			}()
			_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
			f, err := (&frameReader{c: a}).read()
			if tc.ok {
				if err != nil || f.typ != tc.hdr[4] || len(f.payload) != int(n) {
					t.Fatalf("want a frame of type 0x%02x and %d bytes, got %v, %v", tc.hdr[4], n, f, err)
				}
				return
			}
			if rejectCode(err) != eProtocol {
				t.Fatalf("want PROTOCOL, got %v", err)
			}
		})
	}
}

// A frame in pieces is one frame; EOF between frames is the end; EOF inside
// one is PROTOCOL.
func TestFrameReaderPiecesAndEnds(t *testing.T) {
	a, b := socketpair(t)
	r := &frameReader{c: a}
	_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
	data := frameOf(tData, []byte("hello, world"))
	go func() {
		for _, piece := range [][]byte{data[:2], data[2:5], data[5:9], data[9:]} {
			_, _ = b.Write(piece)
			time.Sleep(10 * time.Millisecond)
		}
		_, _ = b.Write(frameOf(tEOF, nil))
		_, _ = b.Write(hdr(4, tResize)[:3])
		_ = b.CloseWrite()
	}()
	f, err := r.read()
	if err != nil || f.typ != tData || string(f.payload) != "hello, world" {
		t.Fatalf("DATA in four pieces: %v %v", f, err)
	}
	if f, err = r.read(); err != nil || f.typ != tEOF {
		t.Fatalf("EOF frame: %v %v", f, err)
	}
	if _, err = r.read(); rejectCode(err) != eProtocol {
		t.Fatalf("a connection closed inside a header: want PROTOCOL, got %v", err)
	}

	c, d := socketpair(t)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_ = d.CloseWrite()
	if _, err := (&frameReader{c: c}).read(); !errors.Is(err, io.EOF) {
		t.Fatalf("a connection closed between frames: want io.EOF, got %v", err)
	}

	e, g := socketpair(t)
	_ = e.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = g.Write(frameOf(tData, []byte("cut short"))[:9])
	_ = g.CloseWrite()
	if _, err := (&frameReader{c: e}).read(); rejectCode(err) != eProtocol {
		t.Fatalf("a connection closed inside a payload: want PROTOCOL, got %v", err)
	}
}

// Descriptors belong to the frame they came with, and more than the reader
// has room for is MSG_CTRUNC.
func TestFrameReaderDescriptors(t *testing.T) {
	a, b := socketpair(t)
	r := &frameReader{c: a}
	_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	start := startPayload(60, "/bin/true")
	if _, _, err := b.WriteMsgUnix(frameOf(tStart, start), unix.UnixRights(fd), nil); err != nil {
		t.Fatal(err)
	}
	_, _ = b.Write(frameOf(tHello, nil))
	f, err := r.read()
	if err != nil || f.typ != tStart || len(f.fds) != 1 || f.ctrunc {
		t.Fatalf("START with one descriptor: %+v %v", f, err)
	}
	unix.Close(f.fds[0])
	if f, err = r.read(); err != nil || len(f.fds) != 0 {
		t.Fatalf("the HELLO after it carries none: %+v %v", f, err)
	}
	many := make([]int, 17)
	for i := range many {
		many[i] = fd
	}
	if _, _, err := b.WriteMsgUnix(frameOf(tStart, start), unix.UnixRights(many...), nil); err != nil {
		t.Fatal(err)
	}
	f, err = r.read()
	if err != nil || !f.ctrunc {
		t.Fatalf("17 descriptors: want MSG_CTRUNC seen, got %+v %v", f, err)
	}
	for _, x := range f.fds {
		unix.Close(x)
	}
}

// startPayload: a START payload (u32 runtime, u16 rows, u16 cols, u16 argc, argc x (u32 len, bytes)).
func startPayload(runtime uint32, argv ...string) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, runtime)
	_ = binary.Write(&b, binary.BigEndian, uint16(24))
	_ = binary.Write(&b, binary.BigEndian, uint16(80))
	_ = binary.Write(&b, binary.BigEndian, uint16(len(argv)))
	for _, a := range argv {
		_ = binary.Write(&b, binary.BigEndian, uint32(len(a)))
		b.WriteString(a)
	}
	return b.Bytes()
}

func args(n int, each int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strings.Repeat("a", each)
	}
	return out
}

// Every limit of TARGET-CONTRACT section 1 at its value and one past, and
// every malformed START.
func TestParseStartLimits(t *testing.T) {
	const ok = 0
	cases := []struct {
		name    string
		payload []byte
		want    uint16
	}{
		{"plain", startPayload(60, "/bin/sh", "-c", "true"), ok},
		{"command of 4096 bytes", startPayload(60, "/"+strings.Repeat("c", 4095)), ok},
		{"command of 4097 bytes", startPayload(60, "/"+strings.Repeat("c", 4096)), eLimit},
		{"128 arguments", startPayload(60, append([]string{"/bin/true"}, args(128, 1)...)...), ok},
		{"129 arguments", startPayload(60, append([]string{"/bin/true"}, args(129, 1)...)...), eLimit},
		{"argument of 16384 bytes", startPayload(60, "/bin/true", strings.Repeat("a", 16384)), ok},
		{"argument of 16385 bytes", startPayload(60, "/bin/true", strings.Repeat("a", 16385)), eLimit},
		{"arguments of 65536 bytes in all", startPayload(60, append([]string{"/bin/true"}, args(4, 16384)...)...), ok},
		{"arguments of 65537 bytes in all",
			startPayload(60, append([]string{"/bin/true", "a"}, args(4, 16384)...)...), eLimit},
		{"runtime 0", startPayload(0, "/bin/true"), eLimit},
		{"runtime 1", startPayload(1, "/bin/true"), ok},
		{"runtime 3600", startPayload(3600, "/bin/true"), ok},
		{"runtime 3601", startPayload(3601, "/bin/true"), eLimit},
		{"runtime 2^32-1", startPayload(0xFFFFFFFF, "/bin/true"), eLimit},
		{"no command", startPayload(60), eProtocol},
		{"empty command", startPayload(60, ""), eProtocol},
		{"NUL inside the command", startPayload(60, "/bin/tr\x00ue"), eProtocol},
		{"NUL as the command's first byte", startPayload(60, "\x00/bin/true"), eProtocol},
		{"NUL as an argument's first byte", startPayload(60, "/bin/echo", "\x00a"), eProtocol},
		{"an argument that is only NUL", startPayload(60, "/bin/echo", "\x00"), eProtocol},
		{"NUL at an argument's end", startPayload(60, "/bin/echo", "a\x00"), eProtocol},
		{"malformed UTF-8", startPayload(60, "/bin/echo", "\xff\xfe"), eProtocol},
		{"an empty argument", startPayload(60, "/bin/echo", ""), ok},
		{"too short", startPayload(60)[:9], eProtocol},
		{"trailing bytes", append(startPayload(60, "/bin/true"), 0), eProtocol},
		{"argc past the payload", startPayload(60, "/bin/true")[:10], eProtocol},
		{"a length past the payload", append(startPayload(60, "/bin/true")[:14], 'x'), eProtocol},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseStart(tc.payload)
			if tc.want == ok {
				if err != nil || len(s.argv) == 0 {
					t.Fatalf("want accepted, got %v", err)
				}
				return
			}
			if got := rejectCode(err); got != tc.want {
				t.Fatalf("want ERROR %d, got %v", tc.want, err)
			}
		})
	}
}

func TestParseStartReadsEveryField(t *testing.T) {
	s, err := parseStart(startPayload(42, "/bin/echo", "a b", "ü"))
	if err != nil {
		t.Fatal(err)
	}
	if s.runtime != 42 || s.rows != 24 || s.cols != 80 || strings.Join(s.argv, "|") != "/bin/echo|a b|ü" {
		t.Fatalf("%+v", s)
	}
}

func TestEncode(t *testing.T) {
	got := encode(tExit, []byte{1, 2})
	if !bytes.Equal(got, []byte{0, 0, 0, 2, tExit, 1, 2}) {
		t.Fatalf("%x", got)
	}
}
