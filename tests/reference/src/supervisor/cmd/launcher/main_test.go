package main

import "testing"

func TestDecodeArg(t *testing.T) {
	good := map[string]string{
		"a":       "",
		"aZWNobw": "echo",
		"aYSBi":   "a b",
		"a_--8":   "\xff\xef\xbc",
		"aJyInJA": "'\"'$",
	}
	for in, want := range good {
		got, err := decodeArg(in)
		if err != nil || got != want {
			t.Errorf("decodeArg(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{"", "b", "ZWNobw", "aZWNobw=", "aZWNobx", "aZ", "a+/", "a ", "aZWNo\nbw", "aYQ==", "aYR"}
	for _, in := range bad {
		if _, err := decodeArg(in); err == nil {
			t.Errorf("decodeArg(%q) accepted", in)
		}
	}
}

func TestDecodeAll(t *testing.T) {
	if _, err := decodeAll(nil); err == nil {
		t.Error("empty argv accepted")
	}
	if _, err := decodeAll([]string{"a"}); err == nil {
		t.Error("empty command accepted")
	}
	got, err := decodeAll([]string{"aZWNobw", "a", "aYSBi"})
	if err != nil || len(got) != 3 || got[0] != "echo" || got[1] != "" || got[2] != "a b" {
		t.Errorf("decodeAll = %q, %v", got, err)
	}
}

func TestParseSize(t *testing.T) {
	if r, c, ok := parseSize("33x101"); !ok || r != 33 || c != 101 {
		t.Errorf("parseSize(33x101) = %d, %d, %v", r, c, ok)
	}
	for _, bad := range []string{"", "0x80", "24x0", "x", "24x", "65536x80", "024x80", " 24x80", "24x80 "} {
		if _, _, ok := parseSize(bad); ok {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}
