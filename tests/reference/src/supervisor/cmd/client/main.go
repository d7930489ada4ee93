// Command opencode-pty-client is the fixed helper of the PTY supervisor
// (reference deployment).
//
// The peer service starts it with fd 3 = a duplicate of its authenticated,
// connected supervisor socket and fd 4 = an O_DIRECTORY descriptor of the
// approved working directory:
//
//	opencode-pty-client [--runtime SECONDS] [--rows R] [--cols C] -- COMMAND [ARG...]
//
// It first makes itself not dumpable: it holds the authenticated connection,
// and a dumpable process of the service user hands it (pidfd_getfd, /proc)
// and its root (/proc/<pid>/root, UNIT-7) to any other process of that user,
// a session's included.
//
// It sends one START frame carrying fd 4 as the only SCM_RIGHTS descriptor,
// closes fd 4, relays stdin as DATA frames (at most 32,768 bytes each), sends
// EOF at end of stdin and STOP on SIGTERM/SIGINT/SIGHUP, and writes DATA from
// the supervisor to stdout. It never connects a socket and never opens a
// path it was given.
//
// Exit status: the session's exit code, 128+N for signal N; 100+code on an
// ERROR frame (101 AUTH ... 107 INTERNAL); 110 connection lost before EXIT;
// 111 malformed frame from the supervisor; 112 usage or descriptor setup.
package main

import (
	"encoding/binary"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
)

const (
	frameHello    = 0x01
	frameStart    = 0x02
	frameData     = 0x03
	frameEOF      = 0x04
	frameResize   = 0x05
	frameStop     = 0x06
	frameHelloOK  = 0x81
	frameStarted  = 0x82
	frameDataOut  = 0x83
	frameExit     = 0x84
	frameError    = 0x85
	maxData       = 32768
	maxInFrame    = 32768
	sockFD        = 3
	dirFD         = 4
	exitLost      = 110
	exitBadFrame  = 111
	exitUsage     = 112
	exitErrorBase = 100
)

var writeMu sync.Mutex

func die(code int, msg string) {
	writeAll(2, []byte("opencode-pty-client: "+msg+"\n"))
	os.Exit(code)
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR || err == syscall.EAGAIN {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func readFull(fd int, b []byte) error {
	for off := 0; off < len(b); {
		n, err := syscall.Read(fd, b[off:])
		if err == syscall.EINTR || err == syscall.EAGAIN {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return syscall.ECONNRESET
		}
		off += n
	}
	return nil
}

func frame(typ byte, payload []byte) []byte {
	b := make([]byte, 5+len(payload))
	binary.BigEndian.PutUint32(b, uint32(len(payload)))
	b[4] = typ
	copy(b[5:], payload)
	return b
}

func send(typ byte, payload []byte) error {
	writeMu.Lock()
	defer writeMu.Unlock()
	return writeAll(sockFD, frame(typ, payload))
}

type request struct {
	runtime, rows, cols uint64
	argv                []string
}

func parseArgs(args []string) request {
	r := request{runtime: 3600, rows: 24, cols: 80}
	for len(args) > 0 {
		a := args[0]
		if a == "--" {
			r.argv = args[1:]
			break
		}
		var dst *uint64
		var bits int
		switch a {
		case "--runtime":
			dst, bits = &r.runtime, 32
		case "--rows":
			dst, bits = &r.rows, 16
		case "--cols":
			dst, bits = &r.cols, 16
		default:
			die(exitUsage, "unknown option "+strconv.Quote(a))
		}
		if len(args) < 2 {
			die(exitUsage, a+" needs a value")
		}
		v, err := strconv.ParseUint(args[1], 10, bits)
		if err != nil {
			die(exitUsage, a+": "+err.Error())
		}
		*dst = v
		args = args[2:]
	}
	if len(r.argv) == 0 {
		die(exitUsage, "usage: opencode-pty-client [--runtime S] [--rows R] [--cols C] -- COMMAND [ARG...]")
	}
	if len(r.argv) > 65535 {
		die(exitUsage, "too many arguments")
	}
	return r
}

func startPayload(r request) []byte {
	b := make([]byte, 10)
	binary.BigEndian.PutUint32(b[0:], uint32(r.runtime))
	binary.BigEndian.PutUint16(b[4:], uint16(r.rows))
	binary.BigEndian.PutUint16(b[6:], uint16(r.cols))
	binary.BigEndian.PutUint16(b[8:], uint16(len(r.argv)))
	for _, a := range r.argv {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(a)))
		b = append(b, l[:]...)
		b = append(b, a...)
	}
	return b
}

func checkFD(fd int, kind uint32, what string) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		die(exitUsage, "fd "+strconv.Itoa(fd)+" ("+what+"): "+err.Error())
	}
	if st.Mode&syscall.S_IFMT != kind {
		die(exitUsage, "fd "+strconv.Itoa(fd)+" is not "+what)
	}
}

func sendStart(payload []byte) {
	b := frame(frameStart, payload)
	oob := syscall.UnixRights(dirFD)
	writeMu.Lock()
	defer writeMu.Unlock()
	for {
		n, err := syscall.SendmsgN(sockFD, b, oob, nil, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			die(exitLost, "send START: "+err.Error())
		}
		if err := writeAll(sockFD, b[n:]); err != nil {
			die(exitLost, "send START: "+err.Error())
		}
		return
	}
}

func relayStdin() {
	buf := make([]byte, 65536)
	for {
		n, err := syscall.Read(0, buf)
		if err == syscall.EINTR || err == syscall.EAGAIN {
			continue
		}
		if err != nil || n == 0 {
			send(frameEOF, nil)
			return
		}
		for off := 0; off < n; off += maxData {
			end := off + maxData
			if end > n {
				end = n
			}
			if send(frameData, buf[off:end]) != nil {
				return
			}
		}
	}
}

func main() {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); e != 0 {
		os.Stderr.WriteString("opencode-pty-client: prctl(PR_SET_DUMPABLE, 0): " + e.Error() + "\n")
		os.Exit(exitUsage)
	}
	r := parseArgs(os.Args[1:])
	checkFD(sockFD, syscall.S_IFSOCK, "a socket")
	checkFD(dirFD, syscall.S_IFDIR, "a directory")
	syscall.CloseOnExec(sockFD)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	signal.Ignore(syscall.SIGPIPE)

	sendStart(startPayload(r))
	syscall.Close(dirFD)

	go func() {
		stopped := false
		for range sigs {
			if !stopped {
				stopped = true
				send(frameStop, nil)
			}
		}
	}()

	started := false
	hdr := make([]byte, 5)
	payload := make([]byte, maxInFrame)
	for {
		if err := readFull(sockFD, hdr); err != nil {
			die(exitLost, "connection lost before EXIT")
		}
		n := binary.BigEndian.Uint32(hdr)
		typ := hdr[4]
		if n > maxInFrame {
			die(exitBadFrame, "oversized frame from supervisor")
		}
		p := payload[:n]
		if err := readFull(sockFD, p); err != nil {
			die(exitLost, "connection lost before EXIT")
		}
		switch typ {
		case frameStarted:
			if started {
				die(exitBadFrame, "second STARTED")
			}
			started = true
			go relayStdin()
		case frameDataOut:
			if writeAll(1, p) != nil {
				// stdout gone: stop the session, keep waiting for EXIT.
				send(frameStop, nil)
			}
		case frameExit:
			if n != 8 {
				die(exitBadFrame, "bad EXIT frame")
			}
			code := int32(binary.BigEndian.Uint32(p[0:]))
			sig := int32(binary.BigEndian.Uint32(p[4:]))
			if sig != 0 {
				os.Exit(int(128 + sig&0x7f))
			}
			os.Exit(int(code & 0xff))
		case frameError:
			if n < 2 {
				die(exitBadFrame, "bad ERROR frame")
			}
			code := int(binary.BigEndian.Uint16(p))
			msg := string(p[2:])
			if code < 1 || code > 9 {
				code = 9
			}
			die(exitErrorBase+code, "supervisor error "+strconv.Itoa(code)+": "+msg)
		default:
			die(exitBadFrame, "unexpected frame type "+strconv.Itoa(int(typ)))
		}
	}
}
