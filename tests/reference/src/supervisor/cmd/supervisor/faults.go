package main

// Fault switches (the fault catalogue's words; same as src/supervisor-python):
//
//	capacity17                   allow 17 sessions instead of 16
//	limits-off-by-one            accept one more command byte, argument, argument byte, aggregate byte and second
//	skip-pin-recheck             do not re-check pidfd/MainPID/InvocationID before start
//	no-supplementary-groups-prop omit SupplementaryGroups= from session units
//	no-inaccessible-paths        omit InaccessiblePaths= from session units
//	allow-no-pidfd               accept peers without SO_PEERPIDFD
//	skip-cgroup-check            do not require the peer's ControlGroup
//	accept-uid-while-stopped     while the peer unit's MainPID is stopped (state T), accept any
//	                             process with the service user's uid/gid as if it were the peer
//	no-orphan-cleanup            do not stop leftover session units at start
//	no-stop-on-disconnect        leave the unit running when the connection closes
//	no-unauth-limit              no quota/rate limit for unauthenticated connections
//	lockout-after-flood          once the quota or rate limit refuses a connection, refuse every
//	                             connection (the real peer too) for 60 s
//	unbounded-output             buffer session output without bound while the client does not read
//	debug-props                  log every Exec*/Result change of session units
//	omit-prop:NAME               omit property NAME (e.g. BindsTo, PrivateDevices) from session units
//	exit-status-zero             report every session end as EXIT (0, 0)
//	session-killmode-process     KillMode=process for session units
//	session-private-network      PrivateNetwork=yes for session units
//	other-framing                every frame to the peer as u8 type + u32 little-endian length
//	unauth-rate-only             no quota on unauthenticated connections held at once: only the
//	                             token bucket, its burst the quota's 8 (a slow flood piles up)
//	nul-check-from-second-byte   the NUL check of START strings starts at their second byte
//	orphans-binds-contains       orphan cleanup stops strict-name units whose BindsTo= contains
//	                             the supervisor, not only those bound to it alone
//	exit-without-flush           once the unit has ended, drop the output not yet written to the
//	                             peer and send EXIT at once
//	session-stop-no-grace        TimeoutStopUSec= 5 ms for session units (microseconds taken for
//	                             milliseconds): SIGKILL 5 ms after the SIGTERM of a stop
//	session-stop-sigkill         KillSignal=SIGKILL for session units: a stop never sends SIGTERM
//	no-signal-sender-check       believe systemd's signals (PropertiesChanged, JobRemoved) from any
//	                             sender, not only from the owner of org.freedesktop.systemd1
//	no-end-confirmation          take a session's end from the signals alone, not confirmed by a
//	                             method call (with no-signal-sender-check: a forged PropertiesChanged
//	                             ends a live session with a forged EXIT)
//
// Not a fault (the bench's what-if; the suite must still pass with it):
//
//	session-stop-sendsighup      SendSIGHUP=yes for session units

import (
	"bufio"
	"os"
	"sort"
	"strings"
	"sync/atomic"
)

const faultsFile = "/etc/opencode-reference/faults"

// faults: the switch words, set once at start (readFaults; the tests set
// their own), read by every goroutine.
var faults atomic.Pointer[map[string]bool]

func init() { setFaults() }

func setFaults(words ...string) {
	m := map[string]bool{}
	for _, w := range words {
		m[w] = true
	}
	faults.Store(&m)
}

func fault(word string) bool { return (*faults.Load())[word] }

func readFaults() {
	var words []string
	if f, err := os.Open(faultsFile); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			w := strings.TrimSpace(strings.SplitN(sc.Text(), "#", 2)[0])
			if w != "" {
				words = append(words, w)
			}
		}
		f.Close()
	} else if !os.IsNotExist(err) {
		logf("cannot read %s: %v", faultsFile, err)
	}
	words = append(words, strings.Fields(os.Getenv("OPENCODE_PTY_FAULTS"))...)
	setFaults(words...)
	if m := *faults.Load(); len(m) > 0 {
		var ws []string
		for w := range m {
			ws = append(ws, w)
		}
		sort.Strings(ws)
		logf("FAULTS ACTIVE: %s", strings.Join(ws, " "))
	}
	if fault("limits-off-by-one") {
		maxCmd, maxArgs, maxArg, maxAgg, maxRuntime = maxCmd+1, maxArgs+1, maxArg+1, maxAgg+1, maxRuntime+1
	}
}

// omitted: the property names the omit-prop:NAME words name
func omitted() map[string]bool {
	out := map[string]bool{}
	for w := range *faults.Load() {
		if strings.HasPrefix(w, "omit-prop:") {
			out[strings.TrimPrefix(w, "omit-prop:")] = true
		}
	}
	return out
}
