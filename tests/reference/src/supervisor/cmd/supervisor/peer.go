package main

// Peer authentication (TARGET-CONTRACT section 2): the connecting process
// must be the MainPID of opencode-v2.service, active/running, in its own
// cgroup, with a 16-byte InvocationID and the service user's uid/gid. The pin
// (pidfd, pid, InvocationID) is checked again right before the unit starts.

import (
	"bytes"
	"fmt"
	"os"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

type pin struct {
	pid   int32
	pidfd int
	inv   []byte
}

// pidfdAlive: the pidfd does not poll readable (POLLIN means the process has
// exited, zombie or not). poll(2) is retried on EINTR: the Go runtime's own
// signals (SIGURG, asynchronous preemption) interrupt it even with a zero
// timeout, and an interrupted poll says nothing about the peer.
func pidfdAlive(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n == 0
	}
}

func authErr(err error, during string) *reject {
	if name := errName(err); name != "" {
		return rejectf(eAuth, "peer is not in a known unit (%s)", name)
	}
	if timedOut(err) {
		return rejectf(eAuth, "D-Bus deadline exceeded during %s", during)
	}
	return rejectf(eAuth, "peer lookup failed during %s: %v", during, err)
}

// props reads the named properties of m with their types: an absent property
// or one of another type is an error naming it (the peer is refused), never a
// zero value compared as if it had been read.
type props map[string]dbus.Variant

func (m props) str(name string) (string, error)  { return as[string](m[name], name) }
func (m props) u32(name string) (uint32, error)  { return as[uint32](m[name], name) }
func (m props) bytes(name string) ([]byte, error) { return as[[]byte](m[name], name) }

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *server) authenticate(pid int32, uid, gid uint32, pidfd int) (*pin, error) {
	if fault("accept-uid-while-stopped") {
		if p := s.stoppedPeer(uid, gid); p != nil {
			return p, nil
		}
	}
	var upath dbus.ObjectPath
	if err := s.bus.call(sdPath, mgrIf+".GetUnitByPID", uint32(pid)).Store(&upath); err != nil {
		return nil, authErr(err, "authentication")
	}
	ua, err := s.bus.getAll(upath, unitIf)
	if err != nil {
		return nil, authErr(err, "authentication")
	}
	sa, err := s.bus.getAll(upath, serviceIf)
	if err != nil {
		return nil, authErr(err, "authentication")
	}
	u, sv := props(ua), props(sa)
	id, err1 := u.str("Id")
	mainPID, err2 := sv.u32("MainPID")
	active, err3 := u.str("ActiveState")
	sub, err4 := u.str("SubState")
	cgroup, err5 := sv.str("ControlGroup")
	inv, err6 := u.bytes("InvocationID")
	if err := firstErr(err1, err2, err3, err4, err5, err6); err != nil {
		return nil, rejectf(eAuth, "peer unit's properties unreadable: %v", err)
	}
	if id != peerUnit {
		return nil, rejectf(eAuth, "peer unit is not %s", peerUnit)
	}
	if mainPID != uint32(pid) {
		return nil, rejectf(eAuth, "peer is not the MainPID of %s", peerUnit)
	}
	if active != "active" || sub != "running" {
		return nil, rejectf(eAuth, "peer unit is not active/running")
	}
	if cgroup != peerCgroup && !fault("skip-cgroup-check") {
		return nil, rejectf(eAuth, "peer ControlGroup is not %s", peerCgroup)
	}
	if len(inv) != 16 {
		return nil, rejectf(eAuth, "peer has no 16-byte InvocationID")
	}
	if uid != s.uid || gid != s.gid {
		return nil, rejectf(eAuth, "peer uid/gid is not %s:%s", serviceUser, serviceGroup)
	}
	if pidfd >= 0 && !pidfdAlive(pidfd) {
		return nil, rejectf(eAuth, "peer exited during authentication")
	}
	s.knownMainPID.Store(pid)
	return &pin{pid: pid, pidfd: pidfd, inv: inv}, nil
}

// stoppedPeer (fault accept-uid-while-stopped): while the peer's MainPID is
// stopped, a process of the service user passes for it (pinned as MainPID).
func (s *server) stoppedPeer(uid, gid uint32) *pin {
	if uid != s.uid || gid != s.gid {
		return nil
	}
	path, err := s.bus.getUnit(peerUnit)
	if err != nil {
		return nil
	}
	mv, err := s.bus.get(path, serviceIf, "MainPID")
	if err != nil {
		return nil
	}
	iv, err := s.bus.get(path, unitIf, "InvocationID")
	if err != nil {
		return nil
	}
	mainPID, err1 := as[uint32](mv, "MainPID")
	inv, err2 := as[[]byte](iv, "InvocationID")
	if firstErr(err1, err2) != nil || mainPID == 0 {
		return nil
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", mainPID))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(stat, ')')
	fields := bytes.Fields(stat[i+1:])
	if i < 0 || len(fields) == 0 || string(fields[0]) != "T" {
		return nil
	}
	logf("fault: accepting a process while MainPID %d is stopped", mainPID)
	return &pin{pid: int32(mainPID), pidfd: -1, inv: inv}
}

// recheck: right before StartTransientUnit, the pinned peer is still alive,
// still the MainPID, and the unit's InvocationID is unchanged (PEER-4).
func (s *server) recheck(p *pin) error {
	if fault("skip-pin-recheck") {
		return nil
	}
	if p.pidfd >= 0 && !pidfdAlive(p.pidfd) {
		return rejectf(eAuth, "authenticated peer has exited")
	}
	path, err := s.bus.getUnit(peerUnit)
	if err != nil {
		if name := errName(err); name != "" {
			return rejectf(eAuth, "peer unit vanished (%s)", name)
		}
		return rejectf(eAuth, "D-Bus deadline exceeded during pin re-check")
	}
	mv, err := s.bus.get(path, serviceIf, "MainPID")
	if err != nil {
		return rejectf(eAuth, "pin re-check failed: %v", err)
	}
	iv, err := s.bus.get(path, unitIf, "InvocationID")
	if err != nil {
		return rejectf(eAuth, "pin re-check failed: %v", err)
	}
	mainPID, err1 := as[uint32](mv, "MainPID")
	inv, err2 := as[[]byte](iv, "InvocationID")
	if err := firstErr(err1, err2); err != nil {
		return rejectf(eAuth, "pin re-check failed: %v", err)
	}
	if mainPID != uint32(p.pid) {
		return rejectf(eAuth, "peer MainPID changed since authentication")
	}
	if !bytes.Equal(inv, p.inv) {
		return rejectf(eAuth, "peer InvocationID changed since authentication")
	}
	if p.pidfd >= 0 && !pidfdAlive(p.pidfd) {
		return rejectf(eAuth, "authenticated peer has exited")
	}
	return nil
}
