package main

import (
	"strings"
	"testing"
)

// ORPHAN-1, CONC-3: strict name and exactly this supervisor in BindsTo=.
func TestOrphanMatching(t *testing.T) {
	good := unitPrefix + "0123456789abcdef0123456789abcdef" + unitSuffix
	cases := []struct {
		name  string
		binds []string
		want  bool
	}{
		{good, []string{selfUnit}, true},
		{good, []string{selfUnit, "dbus.service"}, false},
		{good, []string{"dbus.service", selfUnit}, false},
		{good, []string{selfUnit, selfUnit}, false},
		{good, []string{"dbus.service"}, false},
		{good, nil, false},
		{good, []string{selfUnit + " "}, false},
		{unitPrefix + "0123456789ABCDEF0123456789abcdef" + unitSuffix, []string{selfUnit}, false},
		{unitPrefix + "0123456789abcdef0123456789abcde" + unitSuffix, []string{selfUnit}, false},
		{unitPrefix + "0123456789abcdef0123456789abcdef0" + unitSuffix, []string{selfUnit}, false},
		{unitPrefix + "0123456789abcdef0123456789abcdeg" + unitSuffix, []string{selfUnit}, false},
		{unitPrefix + "0123456789abcdef0123456789abcdef.scope", []string{selfUnit}, false},
		{"x" + good, []string{selfUnit}, false},
		{good + "\n", []string{selfUnit}, false},
		{"opencode-pty-decoy.service", []string{selfUnit}, false},
	}
	for _, tc := range cases {
		if got := isOrphan(tc.name, tc.binds); got != tc.want {
			t.Errorf("isOrphan(%q, %q) = %v, want %v", tc.name, tc.binds, got, tc.want)
		}
	}
}

func TestSessionIDNamesTheHexDigits(t *testing.T) {
	id := "0123456789abcdef0123456789abcdef"
	if got := sessionID(unitPrefix + id + unitSuffix); got != id {
		t.Fatalf("%q", got)
	}
	s := &server{home: "/home/byk"}
	for _, p := range s.unitProps(unitPrefix+id+unitSuffix, []string{"/bin/true"}, 60, 5, 6, 24, 80) {
		if p.Name == "Description" {
			if d := p.Value.Value().(string); d != "opencode PTY session "+id {
				t.Fatalf("Description %q", d)
			}
			return
		}
	}
	t.Fatal("no Description")
}

// UNIT-8: a session unit is bound to exactly this supervisor, and ordered after it.
func TestSessionUnitBinding(t *testing.T) {
	setFaults()
	s := &server{home: "/home/byk"}
	got := map[string]string{}
	for _, p := range s.unitProps(unitPrefix+strings.Repeat("a", 32)+unitSuffix, []string{"/bin/true"}, 60, 5, 6, 0, 0) {
		got[p.Name] = p.Value.String()
	}
	if got["BindsTo"] != `["`+selfUnit+`"]` || got["After"] != `["`+selfUnit+`"]` {
		t.Fatalf("BindsTo %s, After %s", got["BindsTo"], got["After"])
	}
	if _, ok := got["OPENCODE_PTY_WINSIZE"]; ok {
		t.Fatal("no size, yet a size")
	}
}
