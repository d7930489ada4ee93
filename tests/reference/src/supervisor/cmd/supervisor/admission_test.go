package main

import (
	"testing"
	"time"
)

func newAdmission() *server {
	return &server{capacity: sessions, tokens: rateBurst, tokenT: time.Now(), conns: map[*conn]struct{}{}}
}

// FLOOD-1: at most unauthQuota unauthenticated connections at once, however
// many tokens are left.
func TestUnauthenticatedQuota(t *testing.T) {
	setFaults()
	s := newAdmission()
	for i := 0; i < unauthQuota; i++ {
		if why := s.admitUnauth(); why != "" {
			t.Fatalf("connection %d refused: %s", i+1, why)
		}
	}
	if why := s.admitUnauth(); why != "too many unauthenticated connections" {
		t.Fatalf("connection %d: want the quota's refusal, got %q", unauthQuota+1, why)
	}
	s.releaseUnauth()
	if why := s.admitUnauth(); why != "" {
		t.Fatalf("a place freed, yet refused: %s", why)
	}
}

// FLOOD-1: the token bucket, rateBurst at once and ratePerSec after.
func TestTokenBucket(t *testing.T) {
	setFaults()
	s := newAdmission()
	for i := 0; i < rateBurst; i++ {
		if why := s.admitUnauth(); why != "" {
			t.Fatalf("connection %d of the burst refused: %s", i+1, why)
		}
		s.releaseUnauth()
	}
	if why := s.admitUnauth(); why != "connection rate limit" {
		t.Fatalf("connection %d: want the rate limit, got %q", rateBurst+1, why)
	}
	s.mu.Lock()
	s.tokenT = s.tokenT.Add(-time.Second) // a second passes: ratePerSec tokens
	s.mu.Unlock()
	for i := 0; i < int(ratePerSec); i++ {
		if why := s.admitUnauth(); why != "" {
			t.Fatalf("connection %d after a second refused: %s", i+1, why)
		}
		s.releaseUnauth()
	}
	if why := s.admitUnauth(); why != "connection rate limit" {
		t.Fatalf("past the refill: want the rate limit, got %q", why)
	}
	s.mu.Lock()
	s.tokenT = s.tokenT.Add(-time.Hour)
	s.mu.Unlock()
	_ = s.admitUnauth()
	s.mu.Lock()
	tokens := s.tokens
	s.mu.Unlock()
	if tokens > rateBurst {
		t.Fatalf("the bucket holds %g tokens, more than its burst %d", tokens, rateBurst)
	}
}

// FLOOD-2: the last authenticated MainPID skips quota and rate; nobody else
// does, and an unknown pid never matches.
func TestMainPIDExemption(t *testing.T) {
	setFaults()
	s := newAdmission()
	for i := 0; i < unauthQuota; i++ {
		if _, why := s.admit(int32(1000 + i)); why != "" {
			t.Fatal(why)
		}
	}
	if _, why := s.admit(4242); why == "" {
		t.Fatal("past the quota, before any MainPID is known: admitted")
	}
	s.knownMainPID.Store(4242)
	if bypass, why := s.admit(4242); !bypass || why != "" {
		t.Fatalf("the known MainPID: bypass %v, refused %q", bypass, why)
	}
	if bypass, why := s.admit(4243); bypass || why == "" {
		t.Fatalf("another pid: bypass %v, refused %q", bypass, why)
	}
	s2 := newAdmission()
	for i := 0; i < unauthQuota; i++ {
		s2.admit(int32(2000 + i))
	}
	for _, pid := range []int32{0, -1} { // knownMainPID is 0 until a peer authenticates
		if bypass, why := s2.admit(pid); bypass || why == "" {
			t.Fatalf("pid %d: bypass %v, refused %q", pid, bypass, why)
		}
	}
}

func TestLockoutAfterFloodFault(t *testing.T) {
	setFaults("lockout-after-flood")
	defer setFaults()
	s := newAdmission()
	for i := 0; i < unauthQuota; i++ {
		s.admitUnauth()
	}
	s.admitUnauth()
	for i := 0; i < unauthQuota; i++ {
		s.releaseUnauth()
	}
	if why := s.admitUnauth(); why != "locked out after a flood" {
		t.Fatalf("want locked out, got %q", why)
	}
}

// CONC-1: sixteen slots.
func TestSlots(t *testing.T) {
	s := newAdmission()
	for i := 0; i < sessions; i++ {
		if !s.takeSlot() {
			t.Fatalf("slot %d refused", i+1)
		}
	}
	if s.takeSlot() {
		t.Fatal("a seventeenth slot")
	}
	s.releaseSlot()
	if !s.takeSlot() {
		t.Fatal("a freed slot was not given again")
	}
}
