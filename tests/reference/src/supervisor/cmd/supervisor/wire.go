package main

// The wire format (TARGET-CONTRACT section 4): every frame is a u32
// big-endian payload length, a u8 type and the payload.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

const (
	tHello  = 0x01
	tStart  = 0x02
	tData   = 0x03
	tEOF    = 0x04
	tResize = 0x05
	tStop   = 0x06

	tHelloOK = 0x81
	tStarted = 0x82
	tDataOut = 0x83
	tExit    = 0x84
	tError   = 0x85

	eAuth        = 1
	eProtocol    = 2
	eLimit       = 3
	eCapacity    = 4
	eStartFailed = 5
	eRate        = 6
	eInternal    = 7

	maxData = 32768
)

// limits of a START (TARGET-CONTRACT section 1); fault limits-off-by-one adds one to each
var (
	maxCmd     = 4096
	maxArgs    = 128
	maxArg     = 16384
	maxAgg     = 65536
	maxRuntime = 3600
)

// startBound is the contract's START length bound (70,158), taken before the
// fault switches are read: limits-off-by-one moves the five limits, not the
// frame bound at the header.
var startBound = uint32(4 + 2 + 2 + 2 + (4 + maxCmd) + maxArgs*4 + maxAgg)

type bound struct{ lo, hi uint32 }

func inBounds(t byte) (bound, bool) {
	switch t {
	case tHello, tEOF, tStop:
		return bound{0, 0}, true
	case tStart:
		return bound{10, startBound}, true
	case tData:
		return bound{0, maxData}, true
	case tResize:
		return bound{4, 4}, true
	}
	return bound{}, false
}

// reject is a refusal sent to the other side as ERROR(code, msg).
type reject struct {
	code uint16
	msg  string
}

func (r *reject) Error() string { return fmt.Sprintf("%d %s", r.code, r.msg) }

func rejectf(code uint16, format string, a ...interface{}) *reject {
	return &reject{code, fmt.Sprintf(format, a...)}
}

var errPeerGone = errors.New("peer gone")

func encode(t byte, payload []byte) []byte {
	b := make([]byte, 5+len(payload))
	if fault("other-framing") { // another reading of PROTOCOL.md: type first, little-endian length
		b[0] = t
		binary.LittleEndian.PutUint32(b[1:5], uint32(len(payload)))
	} else {
		binary.BigEndian.PutUint32(b[:4], uint32(len(payload)))
		b[4] = t
	}
	copy(b[5:], payload)
	return b
}

type frame struct {
	typ     byte
	payload []byte
	fds     []int
	ctrunc  bool
}

// frameReader reads helper->supervisor frames. Each recvmsg asks for at most
// the rest of the current header or payload, so descriptors are attributed to
// the frame they came with.
type frameReader struct {
	c      *net.UnixConn
	fds    []int
	ctrunc bool
}

// read returns one whole frame; io.EOF at a clean end of stream, a *reject on
// a protocol error, os.ErrDeadlineExceeded when the read deadline passed.
func (r *frameReader) read() (*frame, error) {
	hdr := make([]byte, 5)
	if err := r.fill(hdr, true); err != nil {
		return nil, err
	}
	n, t := binary.BigEndian.Uint32(hdr[:4]), hdr[4]
	b, ok := inBounds(t)
	if !ok {
		if t == tHelloOK || t == tStarted || t == tDataOut || t == tExit || t == tError {
			return nil, rejectf(eProtocol, "frame type 0x%02x in the wrong direction", t)
		}
		return nil, rejectf(eProtocol, "unknown frame type 0x%02x", t)
	}
	if n > b.hi || n < b.lo {
		return nil, rejectf(eProtocol, "frame type 0x%02x with bad length %d", t, n)
	}
	body := make([]byte, n)
	if err := r.fill(body, false); err != nil {
		return nil, err
	}
	f := &frame{typ: t, payload: body, fds: r.fds, ctrunc: r.ctrunc}
	r.fds, r.ctrunc = nil, false
	return f, nil
}

func (r *frameReader) fill(buf []byte, header bool) error {
	got := 0
	for got < len(buf) {
		oob := make([]byte, unix.CmsgSpace(16*4))
		n, oobn, flags, _, err := r.c.ReadMsgUnix(buf[got:], oob)
		if oobn > 0 {
			if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
				for i := range msgs {
					if fds, rerr := unix.ParseUnixRights(&msgs[i]); rerr == nil {
						r.fds = append(r.fds, fds...)
					}
				}
			}
		}
		if flags&unix.MSG_CTRUNC != 0 {
			r.ctrunc = true
		}
		got += n
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return err
			}
			if errors.Is(err, unix.ECONNRESET) || errors.Is(err, io.EOF) {
				if !header || got > 0 { // net reports the end of a stream as io.EOF, never as n == 0
					return rejectf(eProtocol, "connection closed inside a frame")
				}
				return io.EOF
			}
			return err
		}
		if n == 0 {
			if header && got == 0 {
				return io.EOF
			}
			return rejectf(eProtocol, "connection closed inside a frame")
		}
	}
	return nil
}

func validText(b []byte) bool {
	if fault("nul-check-from-second-byte") {
		if bytes.IndexByte(b, 0) > 0 {
			return false
		}
		return utf8.Valid(b)
	}
	for _, c := range b {
		if c == 0 {
			return false
		}
	}
	return utf8.Valid(b)
}

type startRequest struct {
	runtime    uint32
	rows, cols uint16
	argv       []string
}

// parseStart decodes a START payload: u32 runtime, u16 rows, u16 cols, u16
// argc, then argc times u32 length + bytes.
func parseStart(p []byte) (*startRequest, error) {
	if len(p) < 10 {
		return nil, rejectf(eProtocol, "START too short")
	}
	s := &startRequest{runtime: binary.BigEndian.Uint32(p[0:4]), rows: binary.BigEndian.Uint16(p[4:6]),
		cols: binary.BigEndian.Uint16(p[6:8])}
	argc := int(binary.BigEndian.Uint16(p[8:10]))
	off := 10
	var items [][]byte
	for i := 0; i < argc; i++ {
		if off+4 > len(p) {
			return nil, rejectf(eProtocol, "START argc does not match payload length")
		}
		n := int(binary.BigEndian.Uint32(p[off : off+4]))
		off += 4
		if n > len(p)-off {
			return nil, rejectf(eProtocol, "START argument length does not match payload length")
		}
		items = append(items, p[off:off+n])
		off += n
	}
	if off != len(p) {
		return nil, rejectf(eProtocol, "START has trailing bytes")
	}
	if argc < 1 {
		return nil, rejectf(eProtocol, "START without a command")
	}
	cmd, args := items[0], items[1:]
	if len(cmd) > maxCmd {
		return nil, rejectf(eLimit, "command longer than %d bytes", maxCmd)
	}
	if len(args) > maxArgs {
		return nil, rejectf(eLimit, "more than %d arguments", maxArgs)
	}
	agg := 0
	for _, a := range args {
		if len(a) > maxArg {
			return nil, rejectf(eLimit, "argument longer than %d bytes", maxArg)
		}
		agg += len(a)
	}
	if agg > maxAgg {
		return nil, rejectf(eLimit, "arguments longer than %d bytes in total", maxAgg)
	}
	if s.runtime < 1 || s.runtime > uint32(maxRuntime) {
		return nil, rejectf(eLimit, "runtime must be 1..%d seconds", maxRuntime)
	}
	for _, it := range items {
		if !validText(it) {
			return nil, rejectf(eProtocol, "argument is not UTF-8 without NUL")
		}
	}
	if len(cmd) == 0 {
		return nil, rejectf(eProtocol, "empty command")
	}
	for _, it := range items {
		s.argv = append(s.argv, string(it))
	}
	return s, nil
}
