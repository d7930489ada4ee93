package main

import (
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

const forger = ":1.666" // any other connection on the bus: a process of the service user, say

var testUnit = unitPrefix + "00112233445566778899aabbccddeeff" + unitSuffix

func ended(st *unitState) (signalled, confirmed bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.signalled, st.ended
}

// handled: sig has been handled (the dispatcher is in order: a sync after it).
func handled(t *testing.T, b *bus, sig *dbus.Signal) {
	t.Helper()
	b.sigs <- sig
	if !b.sync(5 * time.Second) {
		t.Fatal("dispatcher did not drain")
	}
}

// running: a unit the bus knows, running as a first signal from sender said.
func running(t *testing.T, b *bus, sender string) *unitState {
	st := newUnitState(testUnit)
	b.register(st)
	handled(t, b, propsSignal(sender, testUnit, unitIf, map[string]interface{}{"ActiveState": "active"}))
	return st
}

func inactive(sender string) *dbus.Signal {
	return propsSignal(sender, testUnit, unitIf, map[string]interface{}{"ActiveState": "inactive", "SubState": "dead"})
}

// CONC-2: only the owner of org.freedesktop.systemd1 is believed.
func TestSignalsFromAnotherSenderAreDropped(t *testing.T) {
	setFaults()
	b := testBus(t)
	st := running(t, b, systemdOwner)
	for _, sender := range []string{forger, "", "org.freedesktop.systemd1", busName} {
		handled(t, b, inactive(sender))
		handled(t, b, propsSignal(sender, testUnit, serviceIf, map[string]interface{}{
			"ExecMainCode": int32(1), "ExecMainStatus": int32(42), "Result": "success"}))
		job := &dbus.Signal{Sender: sender, Path: sdPath, Name: sigJobRemoved,
			Body: []interface{}{uint32(7), dbus.ObjectPath("/org/freedesktop/systemd1/job/7"), testUnit, "failed"}}
		handled(t, b, job)
		if s, c := ended(st); s || c {
			t.Fatalf("a PropertiesChanged from %q ended the unit", sender)
		}
		if st.startJob() != "" {
			t.Fatalf("a JobRemoved from %q gave the start job a result", sender)
		}
		if code, sig, err := st.exitPair(); err != nil || code != 0 || sig != 0 {
			t.Fatalf("signals from %q changed the exit status: %d %d %v", sender, code, sig, err)
		}
	}
	if b.dropped.Load() == 0 {
		t.Fatal("nothing counted as dropped")
	}
	handled(t, b, inactive(systemdOwner))
	if s, c := ended(st); !s || c {
		t.Fatalf("systemd's own signal: want signalled (unconfirmed), got %v %v", s, c)
	}
}

// The owner changes only when the bus itself says so.
func TestNameOwnerChangedOnlyFromTheBus(t *testing.T) {
	setFaults()
	b := testBus(t)
	owner := func(sender, name, newOwner string) *dbus.Signal {
		return &dbus.Signal{Sender: sender, Path: "/org/freedesktop/DBus", Name: sigNameOwnerChanged,
			Body: []interface{}{name, systemdOwner, newOwner}}
	}
	handled(t, b, owner(forger, sdName, forger))
	handled(t, b, owner(systemdOwner, sdName, forger))
	if b.owner() != systemdOwner {
		t.Fatalf("a NameOwnerChanged not from the bus moved the owner to %q", b.owner())
	}
	handled(t, b, owner(busName, "org.example.Other", forger))
	if b.owner() != systemdOwner {
		t.Fatalf("another name's change moved systemd's owner to %q", b.owner())
	}
	handled(t, b, &dbus.Signal{Sender: busName, Name: sigNameOwnerChanged, Body: []interface{}{sdName, int32(1)}})
	if b.owner() != systemdOwner {
		t.Fatal("a malformed NameOwnerChanged moved the owner")
	}
	handled(t, b, owner(busName, sdName, ":1.2"))
	if b.owner() != ":1.2" {
		t.Fatalf("the bus's NameOwnerChanged (systemd re-executed): owner %q", b.owner())
	}
	st := newUnitState(testUnit)
	b.register(st)
	handled(t, b, propsSignal(":1.2", testUnit, unitIf, map[string]interface{}{"ActiveState": "active"}))
	handled(t, b, inactive(systemdOwner)) // the old owner's name is nobody's now
	if s, _ := ended(st); s {
		t.Fatal("the old owner was still believed")
	}
	handled(t, b, owner(busName, sdName, ""))
	handled(t, b, inactive(""))
	if s, _ := ended(st); s {
		t.Fatal("with nobody owning systemd's name, a signal without a sender was believed")
	}
}

func TestNoSignalSenderCheckFault(t *testing.T) {
	setFaults("no-signal-sender-check")
	defer setFaults()
	b := testBus(t)
	st := running(t, b, forger)
	handled(t, b, inactive(forger))
	if s, c := ended(st); !s || c {
		t.Fatalf("no-signal-sender-check: want the forger believed (signalled, unconfirmed), got %v %v", s, c)
	}
}

// A signalled end is a hint: confirmEnd asks systemd.
func TestConfirmEnd(t *testing.T) {
	setFaults()
	b := testBus(t)
	f := newFakeCalls(b)
	st := newUnitState(testUnit)
	f.set(testUnit, "active")
	st.onProps(unitIf, map[string]dbus.Variant{"ActiveState": dbus.MakeVariant("active")})
	st.onProps(unitIf, map[string]dbus.Variant{"ActiveState": dbus.MakeVariant("inactive")})
	if !st.endHinted() {
		t.Fatal("not hinted")
	}
	if confirmEnd(f, st) {
		t.Fatal("systemd says active, yet ended")
	}
	if st.endHinted() {
		t.Fatal("the hint stayed after systemd said active")
	}
	for _, state := range []string{"inactive", "failed", ""} {
		st := newUnitState(testUnit)
		f.set(testUnit, state)
		if !confirmEnd(f, st) || !st.isEnded() {
			t.Fatalf("systemd says %q: not confirmed", state)
		}
	}
	f.set(testUnit, "deactivating")
	if confirmEnd(f, newUnitState(testUnit)) {
		t.Fatal("deactivating confirmed as ended")
	}
}

func TestNoEndConfirmationFault(t *testing.T) {
	setFaults("no-end-confirmation")
	defer setFaults()
	st := newUnitState(testUnit)
	st.onProps(unitIf, map[string]dbus.Variant{"ActiveState": dbus.MakeVariant("active")})
	st.onProps(unitIf, map[string]dbus.Variant{"ActiveState": dbus.MakeVariant("failed")})
	if !st.isEnded() {
		t.Fatal("no-end-confirmation: the signal alone should end it")
	}
}

// The first PropertiesChanged of a new unit carries stale values: an
// inactive before it ran says nothing.
func TestInactiveBeforeRunningIsNoEnd(t *testing.T) {
	st := newUnitState(testUnit)
	st.onProps(unitIf, map[string]dbus.Variant{"ActiveState": dbus.MakeVariant("inactive")})
	if s, c := ended(st); s || c {
		t.Fatal("stale inactive taken as an end")
	}
}

// PTY-4: EXIT from ExecMainCode/ExecMainStatus (and how the session ended).
func TestExitMapping(t *testing.T) {
	cases := []struct {
		name           string
		code, status   int32
		result         string
		stopped        bool
		wantC, wantSig int32
	}{
		{"clean exit", 1, 0, "success", false, 0, 0},
		{"exit 3", 1, 3, "exit-code", false, 3, 0},
		{"exit 255", 1, 255, "exit-code", false, 255, 0},
		{"script -e: killed by signal 9 inside", 1, 137, "exit-code", false, 137, 0},
		{"killed by SIGKILL", 2, 9, "signal", false, 0, 9},
		{"killed by SIGTERM", 2, 15, "signal", false, 0, 15},
		{"dumped core on SIGSEGV", 3, 11, "core-dump", false, 0, 11},
		{"stopped, script exited 0", 1, 0, "success", true, 0, 15},
		{"stopped, script exited 1", 1, 1, "exit-code", true, 1, 0},
		{"RuntimeMaxSec, script exited 0", 1, 0, "timeout", false, 0, 15},
		{"stopped and killed", 2, 9, "signal", true, 0, 9},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := newUnitState(testUnit)
			st.onProps(serviceIf, map[string]dbus.Variant{"ExecMainCode": dbus.MakeVariant(tc.code),
				"ExecMainStatus": dbus.MakeVariant(tc.status), "Result": dbus.MakeVariant(tc.result)})
			if tc.stopped {
				st.markStopRequested()
			}
			c, s, err := st.exitPair()
			if err != nil || c != tc.wantC || s != tc.wantSig {
				t.Fatalf("want (%d, %d), got (%d, %d) %v", tc.wantC, tc.wantSig, c, s, err)
			}
		})
	}
}

func TestExitStatusZeroFault(t *testing.T) {
	setFaults("exit-status-zero")
	defer setFaults()
	st := newUnitState(testUnit)
	st.onProps(serviceIf, map[string]dbus.Variant{"ExecMainCode": dbus.MakeVariant(int32(1)),
		"ExecMainStatus": dbus.MakeVariant(int32(3))})
	if c, s, err := st.exitPair(); c != 0 || s != 0 || err != nil {
		t.Fatalf("%d %d %v", c, s, err)
	}
}

// A property of another type never reads as zero: no EXIT is made of it,
// and a mistyped ActiveState ends nothing.
func TestMistypedPropertiesFailClosed(t *testing.T) {
	for name, v := range map[string]interface{}{"ExecMainCode": uint32(1), "ExecMainStatus": "0",
		"Result": int32(0)} {
		st := newUnitState(testUnit)
		st.onProps(serviceIf, map[string]dbus.Variant{name: dbus.MakeVariant(v)})
		if _, _, err := st.exitPair(); err == nil || !strings.Contains(err.Error(), name) {
			t.Fatalf("%s as %T: want an error naming it, got %v", name, v, err)
		}
	}
	st := newUnitState(testUnit)
	st.onProps(unitIf, map[string]dbus.Variant{"ActiveState": dbus.MakeVariant("active")})
	st.onProps(unitIf, map[string]dbus.Variant{"ActiveState": dbus.MakeVariant([]byte("inactive"))})
	if s, c := ended(st); s || c {
		t.Fatal("a mistyped ActiveState ended the unit")
	}
	if _, err := as[uint32](dbus.Variant{}, "MainPID"); err == nil {
		t.Fatal("an absent property read as a value")
	}
	if _, err := as[uint32](dbus.MakeVariant(int32(5)), "MainPID"); err == nil {
		t.Fatal("an int32 read as a uint32")
	}
	m := props{"MainPID": dbus.MakeVariant(uint64(7))}
	if _, err := m.u32("MainPID"); err == nil {
		t.Fatal("a uint64 MainPID read as a uint32")
	}
	if _, err := m.str("Id"); err == nil {
		t.Fatal("an absent Id read as a string")
	}
}

// Malformed signals from systemd's owner are dropped, not half applied.
func TestMalformedSignals(t *testing.T) {
	setFaults()
	b := testBus(t)
	st := newUnitState(testUnit)
	b.register(st)
	handled(t, b, &dbus.Signal{Sender: systemdOwner, Path: st.path, Name: sigPropertiesChanged,
		Body: []interface{}{unitIf}})
	handled(t, b, &dbus.Signal{Sender: systemdOwner, Path: st.path, Name: sigPropertiesChanged,
		Body: []interface{}{int32(1), map[string]dbus.Variant{}}})
	handled(t, b, &dbus.Signal{Sender: systemdOwner, Path: sdPath, Name: sigJobRemoved,
		Body: []interface{}{"x", testUnit}})
	if st.startJob() != "" || st.endHinted() {
		t.Fatal("a malformed signal changed the unit's state")
	}
	handled(t, b, &dbus.Signal{Sender: systemdOwner, Path: sdPath, Name: sigJobRemoved,
		Body: []interface{}{uint32(9), dbus.ObjectPath("/org/freedesktop/systemd1/job/9"), testUnit, "done"}})
	if st.startJob() != "done" {
		t.Fatalf("systemd's JobRemoved: %q", st.startJob())
	}
}
