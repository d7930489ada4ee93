package main

// Session units: the properties StartTransientUnit sets (TARGET-CONTRACT
// section 1), stopping a unit and waiting until it and its cgroup are gone,
// and the orphan cleanup at start.

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

const (
	stopTimeoutUSec = 5_000_000
	unitPrefix      = "opencode-pty-" // a session unit's name: the prefix, 32 lower-case hex digits, the suffix
	unitSuffix      = ".service"
)

var unitRe = regexp.MustCompile(`^` + regexp.QuoteMeta(unitPrefix) + `[0-9a-f]{32}` + regexp.QuoteMeta(unitSuffix) + `$`)

// sessionID: the 32 hex digits that name a session unit (its name without
// unitPrefix and unitSuffix).
func sessionID(unit string) string {
	return strings.TrimSuffix(strings.TrimPrefix(unit, unitPrefix), unitSuffix)
}

// isOrphan: a unit the orphan cleanup stops, a session unit by its strict
// name whose BindsTo= is exactly this supervisor: a unit bound to it and to
// anything else as well is not ours to stop (ORPHAN-1, CONC-3).
func isOrphan(name string, bindsTo []string) bool {
	return unitRe.MatchString(name) && len(bindsTo) == 1 && bindsTo[0] == selfUnit
}

// allowList is the (bas) of RestrictAddressFamilies= and SystemCallFilter=.
type allowList struct {
	Allow bool
	Items []string
}

func prop(name string, v interface{}) sd.Property {
	return sd.Property{Name: name, Value: dbus.MakeVariant(v)}
}

func (s *server) unitProps(unit string, argv []string, runtime uint32, ptyFd, cwdFd int, rows, cols uint16) []sd.Property {
	cmd := []string{launcher}
	for _, a := range argv {
		cmd = append(cmd, "a"+base64.RawURLEncoding.EncodeToString([]byte(a)))
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + s.home, "TERM=xterm-256color", "LANG=C.UTF-8"}
	if rows > 0 && cols > 0 {
		// read (and dropped) by the launcher, which sizes the PTY before execve
		env = append(env, fmt.Sprintf("OPENCODE_PTY_WINSIZE=%dx%d", rows, cols))
	}
	killMode := "control-group"
	if fault("session-killmode-process") {
		killMode = "process"
	}
	stopTimeout := uint64(stopTimeoutUSec)
	if fault("session-stop-no-grace") {
		stopTimeout /= 1000 // 5 ms: SIGKILL right after SIGTERM
	}
	p := []sd.Property{
		prop("Description", "opencode PTY session "+sessionID(unit)),
		prop("Type", "exec"),
		sd.PropExecStart(cmd, false),
		prop("Slice", sessionSlice),
		prop("BindsTo", []string{selfUnit}),
		prop("After", []string{selfUnit}),
		prop("User", serviceUser),
		prop("Group", serviceGroup),
		prop("CapabilityBoundingSet", uint64(0)),
		prop("AmbientCapabilities", uint64(0)),
		prop("NoNewPrivileges", true),
		prop("PrivateDevices", true),
		prop("DevicePolicy", "closed"),
		prop("Delegate", false),
		prop("ProtectProc", "invisible"),
		prop("ProcSubset", "pid"),
		prop("RestrictNamespaces", uint64(0)),
		prop("RestrictAddressFamilies", allowList{true, []string{"AF_UNIX", "AF_INET", "AF_INET6"}}),
		prop("SystemCallArchitectures", []string{"native"}),
		prop("SystemCallFilter", allowList{true, []string{"@system-service"}}),
		prop("ProtectSystem", "full"),
		prop("PrivateTmp", true),
		prop("ProtectKernelTunables", true),
		prop("ProtectKernelModules", true),
		prop("ProtectKernelLogs", true),
		prop("ProtectControlGroups", true),
		prop("LockPersonality", true),
		prop("RestrictSUIDSGID", true),
		prop("RestrictRealtime", true),
		prop("Environment", env),
		prop("RuntimeMaxUSec", uint64(runtime)*1_000_000),
		prop("KillMode", killMode),
		prop("TimeoutStopUSec", stopTimeout),
		prop("StandardInputFileDescriptor", dbus.UnixFD(ptyFd)),
		prop("StandardOutputFileDescriptor", dbus.UnixFD(ptyFd)),
		prop("StandardErrorFileDescriptor", dbus.UnixFD(cwdFd)),
		prop("CollectMode", "inactive-or-failed"),
	}
	if fault("session-stop-sendsighup") {
		p = append(p, prop("SendSIGHUP", true))
	}
	if fault("session-private-network") {
		p = append(p, prop("PrivateNetwork", true))
	}
	if fault("session-stop-sigkill") {
		p = append(p, prop("KillSignal", int32(9))) // SIGKILL: a stop never sends SIGTERM
	}
	if !fault("no-supplementary-groups-prop") {
		p = append(p, prop("SupplementaryGroups", []string{}))
	}
	if !fault("no-inaccessible-paths") {
		p = append(p, prop("InaccessiblePaths", []string{sockDir, "-/run/docker.sock", "-/run/dbus", "-/run/user"}))
	}
	omit := omitted()
	out := p[:0]
	for _, x := range p {
		if !omit[x.Name] {
			out = append(out, x)
		}
	}
	return out
}

func ctx5() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), dbusTimeout)
}

func (s *server) stopUnit(unit string) {
	if err := s.calls.stop(unit); err != nil {
		if timedOut(err) {
			logf("CLEANUP-ERROR StopUnit deadline %s", unit)
		} else if errName(err) != noSuchUnit {
			logf("CLEANUP-ERROR StopUnit %s %v", unit, err)
		}
	}
}

// stopAndWait stops a session unit and waits until it and its cgroup are
// gone; false (logged as CLEANUP-ERROR) when that could not be confirmed.
func (s *server) stopAndWait(st *unitState, cgroup string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	s.stopUnit(st.unit)
	ok := s.waitGone(st, cgroup, deadline)
	if !ok {
		logf("CLEANUP-ERROR unit still present, sending SIGKILL %s", st.unit)
		if err := s.calls.kill(st.unit, 9); err != nil {
			logf("CLEANUP-ERROR KillUnit %s %v", st.unit, err)
		}
		ok = s.waitGone(st, cgroup, time.Now().Add(5*time.Second))
		if !ok {
			logf("CLEANUP-ERROR unit could not be removed %s", st.unit)
		}
	}
	return ok
}

func cgroupExists(cg string) bool {
	if cg == "" {
		return false
	}
	fi, err := os.Stat("/sys/fs/cgroup" + cg)
	return err == nil && fi.IsDir()
}

// waitGone: until the unit has ended (or is no longer loaded), as systemd
// answers a method call, and its cgroup is gone, or the deadline.
func (s *server) waitGone(st *unitState, cgroup string, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		if !st.isEnded() {
			st.waitChange(50 * time.Millisecond)
		}
		gone := confirmEnd(s.calls, st)
		if gone && !cgroupExists(cgroup) {
			return true
		}
		if gone {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return false
}

// cleanupOrphans stops session units a previous instance left (strict name,
// bound to this supervisor) and waits until they are gone.
func (s *server) cleanupOrphans() {
	if fault("no-orphan-cleanup") {
		logf("orphan cleanup disabled by fault switch")
		return
	}
	ctx, cancel := ctx5()
	units, err := s.bus.sd.ListUnitsByPatternsContext(ctx, []string{}, []string{"opencode-pty-*.service"})
	cancel()
	if err != nil {
		logf("CLEANUP-ERROR ListUnitsByPatterns %v", err)
		return
	}
	type wait struct {
		st *unitState
		cg string
	}
	var waits []wait
	for _, u := range units {
		if !unitRe.MatchString(u.Name) { // no property of a unit of another name is even read
			continue
		}
		v, err := s.bus.get(u.Path, unitIf, "BindsTo")
		if err != nil {
			logf("CLEANUP-ERROR reading BindsTo of %s %v", u.Name, err)
			continue
		}
		binds, err := as[[]string](v, "BindsTo")
		if err != nil {
			logf("leaving %s alone: %v", u.Name, err)
			continue
		}
		orphan := isOrphan(u.Name, binds)
		if fault("orphans-binds-contains") {
			orphan = boundTo(binds, selfUnit)
		}
		if !orphan {
			logf("leaving %s alone: BindsTo %v", u.Name, binds)
			continue
		}
		logf("stopping orphan session unit %s", u.Name)
		st := newUnitState(u.Name)
		s.bus.register(st)
		cg := ""
		if v, err := s.bus.get(u.Path, serviceIf, "ControlGroup"); err == nil {
			if cg, err = as[string](v, "ControlGroup"); err != nil {
				logf("CLEANUP-ERROR %s: %v (waiting for the unit only)", u.Name, err)
			}
		}
		s.stopUnit(u.Name)
		waits = append(waits, wait{st, cg})
	}
	for _, w := range waits {
		ok := s.waitGone(w.st, w.cg, time.Now().Add(15*time.Second))
		if !ok {
			ctx, cancel := ctx5()
			_ = s.bus.sd.ResetFailedUnitContext(ctx, w.st.unit)
			cancel()
			ok = s.waitGone(w.st, w.cg, time.Now().Add(time.Second))
		}
		s.bus.unregister(w.st)
		if !ok {
			logf("CLEANUP-ERROR orphan unit not removed %s", w.st.unit)
		}
	}
}

// boundTo: whether binds names unit (the orphans-binds-contains fault's match)
func boundTo(binds []string, unit string) bool {
	for _, b := range binds {
		if b == unit {
			return true
		}
	}
	return false
}
