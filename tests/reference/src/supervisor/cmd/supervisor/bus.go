package main

// The system bus: go-systemd's client (sd) starts, stops and kills units and
// lists them; a plain godbus connection (raw) reads properties, resolves the
// peer's unit and receives systemd's signals: PropertiesChanged, from which a
// session's end and exit status are taken (the unit is collected at once),
// and JobRemoved, the result of a session's start job.
//
// Signals are forgeable: the bus delivers a signal addressed to our unique
// name whatever our match rules say, its policy lets any local user send one,
// and session unit names are public. A signal counts only when its sender is
// the unique name that owns org.freedesktop.systemd1 (GetNameOwner at
// connect, then NameOwnerChanged, believed only from the bus itself), and a
// session's end is confirmed by a method call before it is acted on
// (confirmEnd); everything else is logged and dropped (CONC-2).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
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
	busName    = "org.freedesktop.DBus" // the bus itself: the sender of its own signals
	noSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
	syncMarker = "\x00sync"

	sigPropertiesChanged = propsIf + ".PropertiesChanged"
	sigJobRemoved        = mgrIf + ".JobRemoved"
	sigNameOwnerChanged  = busName + ".NameOwnerChanged"
)

// as is v's value as a T, or an error naming what it is: a value of another
// D-Bus type never reads as T's zero value.
func as[T any](v dbus.Variant, what string) (T, error) {
	x, ok := v.Value().(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("%s: D-Bus type %q, expected %T", what, v.Signature(), zero)
	}
	return x, nil
}

// unitCalls are the method calls a session's unit needs once it runs: a *bus
// makes them over the system bus (a fake in the tests).
type unitCalls interface {
	stop(unit string) error
	kill(unit string, signal int32) error
	unitGone(unit string) (bool, error)
	activeState(path dbus.ObjectPath) (string, error)
}

type bus struct {
	sd   *sd.Conn
	raw  *dbus.Conn
	sigs chan *dbus.Signal

	mu      sync.Mutex
	units   map[dbus.ObjectPath]*unitState
	byName  map[string]*unitState
	sdOwner string // the unique name that owns org.freedesktop.systemd1 ("" while nobody does)

	dropped atomic.Int64 // signals from other senders, dropped
}

func newBus() *bus {
	// A buffer large enough that godbus never hands a signal to a goroutine
	// of its own: signals stay in the order they arrived.
	return &bus{sigs: make(chan *dbus.Signal, 8192), units: map[dbus.ObjectPath]*unitState{},
		byName: map[string]*unitState{}}
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
	b := newBus()
	b.sd, b.raw = sdc, raw
	raw.Signal(b.sigs)
	ctx, cancel := context.WithTimeout(context.Background(), dbusTimeout)
	defer cancel()
	// who owns systemd's name: watched before it is asked, so no change is missed
	if err := raw.AddMatchSignalContext(ctx, dbus.WithMatchSender(busName), dbus.WithMatchInterface(busName),
		dbus.WithMatchMember("NameOwnerChanged"), dbus.WithMatchArg(0, sdName)); err != nil {
		return nil, err
	}
	var owner string
	if err := raw.BusObject().CallWithContext(ctx, busName+".GetNameOwner", 0, sdName).Store(&owner); err != nil {
		return nil, fmt.Errorf("GetNameOwner %s: %w", sdName, err)
	}
	b.setOwner(owner)
	if err := raw.AddMatchSignalContext(ctx, dbus.WithMatchSender(sdName), dbus.WithMatchInterface(propsIf),
		dbus.WithMatchMember("PropertiesChanged"), dbus.WithMatchPathNamespace(sdPath+"/unit")); err != nil {
		return nil, err
	}
	if err := raw.AddMatchSignalContext(ctx, dbus.WithMatchSender(sdName), dbus.WithMatchInterface(mgrIf),
		dbus.WithMatchMember("JobRemoved"), dbus.WithMatchObjectPath(sdPath)); err != nil {
		return nil, err
	}
	if err := b.call(sdPath, mgrIf+".Subscribe").Store(); err != nil {
		return nil, err
	}
	go b.dispatch()
	return b, nil
}

func (b *bus) alive() bool { return b.raw.Connected() }

func (b *bus) setOwner(owner string) {
	b.mu.Lock()
	b.sdOwner = owner
	b.mu.Unlock()
	logf("%s is owned by %q: its signals are the only ones believed", sdName, owner)
}

func (b *bus) owner() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sdOwner
}

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

// activeState: the unit's ActiveState, read by a method call.
func (b *bus) activeState(path dbus.ObjectPath) (string, error) {
	v, err := b.get(path, unitIf, "ActiveState")
	if err != nil {
		return "", err
	}
	return as[string](v, "ActiveState")
}

func (b *bus) stop(unit string) error {
	ctx, cancel := ctx5()
	defer cancel()
	_, err := b.sd.StopUnitContext(ctx, unit, "replace", nil)
	return err
}

func (b *bus) kill(unit string, signal int32) error {
	ctx, cancel := ctx5()
	defer cancel()
	return b.sd.KillUnitWithTarget(ctx, unit, sd.All, signal)
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
	b.byName[st.unit] = st
	b.mu.Unlock()
}

func (b *bus) unregister(st *unitState) {
	b.mu.Lock()
	if b.units[st.path] == st {
		delete(b.units, st.path)
	}
	if b.byName[st.unit] == st {
		delete(b.byName, st.unit)
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
		b.handle(sig)
	}
	logf("system bus signal channel closed; exiting")
	os.Exit(70)
}

// fromSystemd: sig was sent by the current owner of systemd's name.
func (b *bus) fromSystemd(sig *dbus.Signal) bool {
	if fault("no-signal-sender-check") {
		return true
	}
	owner := b.owner()
	return owner != "" && sig.Sender == owner
}

// handle one signal, in arrival order.
func (b *bus) handle(sig *dbus.Signal) {
	if sig.Name == syncMarker && sig.Sender == "" && len(sig.Body) == 1 {
		if done, ok := sig.Body[0].(chan struct{}); ok {
			close(done)
		}
		return
	}
	if sig.Name == sigNameOwnerChanged {
		b.nameOwnerChanged(sig)
		return
	}
	if sig.Name != sigPropertiesChanged && sig.Name != sigJobRemoved {
		return
	}
	if !b.fromSystemd(sig) {
		if n := b.dropped.Add(1); n <= 20 || n%1000 == 0 {
			logf("dropped %s on %s from %q: not %s's owner %q (%d dropped so far)", sig.Name, sig.Path,
				sig.Sender, sdName, b.owner(), n)
		}
		return
	}
	if sig.Name == sigJobRemoved {
		b.jobRemoved(sig)
		return
	}
	b.mu.Lock()
	st := b.units[sig.Path]
	b.mu.Unlock()
	if st == nil {
		return
	}
	if len(sig.Body) < 2 {
		logf("malformed PropertiesChanged on %s: %d arguments", sig.Path, len(sig.Body))
		return
	}
	iface, ok1 := sig.Body[0].(string)
	changed, ok2 := sig.Body[1].(map[string]dbus.Variant)
	if !ok1 || !ok2 {
		logf("malformed PropertiesChanged on %s: arguments %T, %T", sig.Path, sig.Body[0], sig.Body[1])
		return
	}
	st.onProps(iface, changed)
}

// nameOwnerChanged: believed from the bus itself only (no other connection
// can send as org.freedesktop.DBus: the bus stamps every sender).
func (b *bus) nameOwnerChanged(sig *dbus.Signal) {
	if sig.Sender != busName {
		if n := b.dropped.Add(1); n <= 20 || n%1000 == 0 {
			logf("dropped NameOwnerChanged from %q: only %s says who owns a name", sig.Sender, busName)
		}
		return
	}
	var name, old, owner string
	if err := dbus.Store(sig.Body, &name, &old, &owner); err != nil {
		logf("malformed NameOwnerChanged: %v", err)
		return
	}
	if name == sdName {
		b.setOwner(owner)
	}
}

func (b *bus) jobRemoved(sig *dbus.Signal) {
	var id uint32
	var job dbus.ObjectPath
	var unit, result string
	if err := dbus.Store(sig.Body, &id, &job, &unit, &result); err != nil {
		logf("malformed JobRemoved: %v", err)
		return
	}
	b.mu.Lock()
	st := b.byName[unit]
	b.mu.Unlock()
	if st != nil {
		st.onJob(job, result)
	}
}

// unitState is what systemd's own signals told about one session unit.
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
	jobResult     string // the start job's, from JobRemoved ("" until then)
	signalled     bool   // the signals said it went inactive or failed after running
	ended         bool   // confirmed by a method call (confirmEnd)
	stopRequested bool
	unreadable    []string // exit properties of an unexpected type: no EXIT can be made of them
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
			if s, err := as[string](v, "ActiveState"); err != nil {
				logf("%s: %v (ignored)", st.unit, err)
			} else {
				st.noteActiveStateLocked(s)
			}
		}
	}
	if iface == serviceIf {
		if fault("debug-props") {
			logf("props %s %v", st.unit, ch)
		}
		if v, ok := ch["ExecMainCode"]; ok {
			st.execCode = st.int32Locked(v, "ExecMainCode")
		}
		if v, ok := ch["ExecMainStatus"]; ok {
			st.execStatus = st.int32Locked(v, "ExecMainStatus")
		}
		if v, ok := ch["Result"]; ok {
			if s, err := as[string](v, "Result"); err != nil {
				st.unreadable = append(st.unreadable, err.Error())
			} else {
				st.result = s
			}
		}
	}
	st.mu.Unlock()
	st.wake()
}

func (st *unitState) int32Locked(v dbus.Variant, what string) int32 {
	x, err := as[int32](v, what)
	if err != nil {
		st.unreadable = append(st.unreadable, err.Error())
	}
	return x
}

func (st *unitState) noteActiveStateLocked(s string) {
	st.activeState = s
	switch s {
	case "activating", "active", "deactivating", "reloading":
		st.seenRunning = true
	case "inactive", "failed":
		if st.seenRunning {
			st.signalled = true
			if fault("no-end-confirmation") {
				st.ended = true
			}
		}
	}
}

func (st *unitState) onJob(job dbus.ObjectPath, result string) {
	st.mu.Lock()
	if st.jobResult == "" {
		st.jobResult = result
		if result == "done" {
			st.seenRunning = true
		}
	}
	st.mu.Unlock()
	st.wake()
}

// startJob: the start job's result, "" until JobRemoved said it.
func (st *unitState) startJob() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.jobResult
}

func (st *unitState) isEnded() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ended
}

// endHinted: the signals say the unit has ended, not yet confirmed.
func (st *unitState) endHinted() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return !st.ended && (st.signalled || st.activeState == "inactive" || st.activeState == "failed")
}

func (st *unitState) markStopRequested() {
	st.mu.Lock()
	st.stopRequested = true
	st.mu.Unlock()
}

// confirmEnd asks systemd whether the unit has ended (it is no longer loaded,
// or its ActiveState is inactive or failed) and records the answer: what the
// signals said is a hint, never the decision.
func confirmEnd(calls unitCalls, st *unitState) bool {
	if st.isEnded() {
		return true
	}
	gone, err := calls.unitGone(st.unit)
	if err != nil {
		return false
	}
	state := "gone"
	if !gone {
		if state, err = calls.activeState(st.path); err != nil {
			return false
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch state {
	case "gone", "inactive", "failed":
		st.ended = true
	default:
		if st.signalled {
			logf("%s: the signals said it ended, systemd says %s: not ended", st.unit, state)
		}
		st.activeState, st.signalled = state, false
	}
	return st.ended
}

// exitPair is EXIT's (exit_code, signal): the unit's ExecMainCode/Status as
// systemd saw them; a session ended by a stop or by RuntimeMaxSec= whose
// script(1) then exited 0 is reported as signal 15. An error when an exit
// property came in a type that is not its own: no EXIT is made up.
func (st *unitState) exitPair() (int32, int32, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if fault("exit-status-zero") {
		return 0, 0, nil
	}
	if len(st.unreadable) > 0 {
		return 0, 0, fmt.Errorf("exit status unreadable: %v", st.unreadable)
	}
	if st.execCode == 2 || st.execCode == 3 {
		return 0, st.execStatus, nil
	}
	if st.execStatus == 0 && (st.stopRequested || st.result == "timeout") {
		return 0, 15, nil
	}
	return st.execStatus, 0, nil
}

// summary: what the signals said, for the log (under the lock: the
// dispatcher may still be writing).
func (st *unitState) summary() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return fmt.Sprintf("state %s result %s exec %d %d", st.activeState, st.result, st.execCode, st.execStatus)
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
