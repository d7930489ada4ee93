package main

// The system bus: go-systemd's client (sd) starts, stops and kills units and
// lists them; a plain godbus connection (raw) reads properties, resolves the
// peer's unit and receives systemd's PropertiesChanged signals, from which a
// session's end and exit status are taken (the unit is collected at once).

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

const (
	sdName     = "org.freedesktop.systemd1"
	sdPath     = dbus.ObjectPath("/org/freedesktop/systemd1")
	mgrIf      = sdName + ".Manager"
	unitIf     = sdName + ".Unit"
	serviceIf  = sdName + ".Service"
	propsIf    = "org.freedesktop.DBus.Properties"
	noSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
	syncMarker = "\x00sync"
)

type bus struct {
	sd    *sd.Conn
	raw   *dbus.Conn
	sigs  chan *dbus.Signal
	mu    sync.Mutex
	units map[dbus.ObjectPath]*unitState
}

func openBus() (*bus, error) {
	// The connections live as long as the context they are made with: not a
	// deadline's.
	sdc, err := sd.NewSystemConnectionContext(context.Background())
	if err != nil {
		return nil, err
	}
	raw, err := dbus.SystemBusPrivate(dbus.WithContext(context.Background()))
	if err != nil {
		return nil, err
	}
	if err := raw.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		return nil, err
	}
	if err := raw.Hello(); err != nil {
		return nil, err
	}
	// A buffer large enough that godbus never hands a signal to a goroutine
	// of its own: signals stay in the order they arrived.
	b := &bus{sd: sdc, raw: raw, sigs: make(chan *dbus.Signal, 8192), units: map[dbus.ObjectPath]*unitState{}}
	raw.Signal(b.sigs)
	ctx, cancel := context.WithTimeout(context.Background(), dbusTimeout)
	defer cancel()
	if err := raw.AddMatchSignalContext(ctx, dbus.WithMatchSender(sdName), dbus.WithMatchInterface(propsIf),
		dbus.WithMatchMember("PropertiesChanged"), dbus.WithMatchPathNamespace(sdPath+"/unit")); err != nil {
		return nil, err
	}
	if err := b.call(sdPath, mgrIf+".Subscribe").Store(); err != nil {
		return nil, err
	}
	go b.dispatch()
	return b, nil
}

func (b *bus) alive() bool { return b.raw.Connected() }

func (b *bus) call(path dbus.ObjectPath, method string, args ...interface{}) *dbus.Call {
	ctx, cancel := context.WithTimeout(context.Background(), dbusTimeout)
	defer cancel()
	return b.raw.Object(sdName, path).CallWithContext(ctx, method, 0, args...)
}

func (b *bus) get(path dbus.ObjectPath, iface, name string) (dbus.Variant, error) {
	var v dbus.Variant
	err := b.call(path, propsIf+".Get", iface, name).Store(&v)
	return v, err
}

func (b *bus) getAll(path dbus.ObjectPath, iface string) (map[string]dbus.Variant, error) {
	m := map[string]dbus.Variant{}
	err := b.call(path, propsIf+".GetAll", iface).Store(&m)
	return m, err
}

func (b *bus) getUnit(name string) (dbus.ObjectPath, error) {
	var p dbus.ObjectPath
	err := b.call(sdPath, mgrIf+".GetUnit", name).Store(&p)
	return p, err
}

// unitGone: the unit is no longer loaded (GetUnit answers NoSuchUnit).
func (b *bus) unitGone(name string) (bool, error) {
	_, err := b.getUnit(name)
	if err == nil {
		return false, nil
	}
	if errName(err) == noSuchUnit {
		return true, nil
	}
	return false, err
}

// errName: the D-Bus error name of err, "" when it is not a D-Bus error reply.
func errName(err error) string {
	var e dbus.Error
	if errors.As(err, &e) {
		return e.Name
	}
	var pe *dbus.Error
	if errors.As(err, &pe) {
		return pe.Name
	}
	return ""
}

func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded)
}

func unitPath(name string) dbus.ObjectPath {
	return sdPath + "/unit/" + dbus.ObjectPath(sd.PathBusEscape(name))
}

func (b *bus) register(st *unitState) {
	b.mu.Lock()
	b.units[st.path] = st
	b.mu.Unlock()
}

func (b *bus) unregister(st *unitState) {
	b.mu.Lock()
	if b.units[st.path] == st {
		delete(b.units, st.path)
	}
	b.mu.Unlock()
}

// sync waits until every signal received before it was called has been
// handled: after a reply (GetUnit -> NoSuchUnit) the PropertiesChanged
// systemd sent before it (the final ExecMain*/Result) are in.
func (b *bus) sync(timeout time.Duration) bool {
	done := make(chan struct{})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case b.sigs <- &dbus.Signal{Name: syncMarker, Body: []interface{}{done}}:
	case <-t.C:
		return false
	}
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func (b *bus) dispatch() {
	for sig := range b.sigs {
		if sig.Name == syncMarker {
			close(sig.Body[0].(chan struct{}))
			continue
		}
		if sig.Name != propsIf+".PropertiesChanged" || len(sig.Body) < 2 {
			continue
		}
		b.mu.Lock()
		st := b.units[sig.Path]
		b.mu.Unlock()
		if st == nil {
			continue
		}
		iface, _ := sig.Body[0].(string)
		changed, _ := sig.Body[1].(map[string]dbus.Variant)
		st.onProps(iface, changed)
	}
	logf("system bus signal channel closed; exiting")
	os.Exit(70)
}

// unitState is what the PropertiesChanged signals told about one session unit.
type unitState struct {
	unit    string
	path    dbus.ObjectPath
	changed chan struct{} // one pending wake-up

	mu            sync.Mutex
	activeState   string
	seenRunning   bool
	execCode      int32 // CLD_EXITED=1, CLD_KILLED=2, CLD_DUMPED=3
	execStatus    int32
	result        string
	ended         bool
	stopRequested bool
}

func newUnitState(unit string) *unitState {
	return &unitState{unit: unit, path: unitPath(unit), changed: make(chan struct{}, 1)}
}

func (st *unitState) wake() {
	select {
	case st.changed <- struct{}{}:
	default:
	}
}

func (st *unitState) onProps(iface string, ch map[string]dbus.Variant) {
	st.mu.Lock()
	if iface == unitIf {
		if v, ok := ch["ActiveState"]; ok {
			s, _ := v.Value().(string)
			st.activeState = s
			switch s {
			case "activating", "active", "deactivating", "reloading":
				st.seenRunning = true
			case "inactive", "failed":
				if st.seenRunning {
					st.ended = true
				}
			}
		}
	}
	if iface == serviceIf {
		if fault("debug-props") {
			logf("props %s %v", st.unit, ch)
		}
		if v, ok := ch["ExecMainCode"]; ok {
			st.execCode, _ = v.Value().(int32)
		}
		if v, ok := ch["ExecMainStatus"]; ok {
			st.execStatus, _ = v.Value().(int32)
		}
		if v, ok := ch["Result"]; ok {
			st.result, _ = v.Value().(string)
		}
	}
	st.mu.Unlock()
	st.wake()
}

func (st *unitState) jobDone() {
	st.mu.Lock()
	st.seenRunning = true
	st.mu.Unlock()
}

func (st *unitState) isEnded() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ended
}

func (st *unitState) setEnded() {
	st.mu.Lock()
	st.ended = true
	st.mu.Unlock()
}

func (st *unitState) inactive() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.activeState == "inactive" || st.activeState == "failed"
}

func (st *unitState) markStopRequested() {
	st.mu.Lock()
	st.stopRequested = true
	st.mu.Unlock()
}

// exitPair is EXIT's (exit_code, signal): the unit's ExecMainCode/Status as
// systemd saw them; a session ended by a stop or by RuntimeMaxSec= whose
// script(1) then exited 0 is reported as signal 15.
func (st *unitState) exitPair() (int32, int32) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if fault("exit-status-zero") {
		return 0, 0
	}
	if st.execCode == 2 || st.execCode == 3 {
		return 0, st.execStatus
	}
	if st.execStatus == 0 && (st.stopRequested || st.result == "timeout") {
		return 0, 15
	}
	return st.execStatus, 0
}

// waitChange: until the next signal for this unit, or d.
func (st *unitState) waitChange(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-st.changed:
	case <-t.C:
	}
}
