"""opencode PTY supervisor, reference deployment (Python 3 + jeepney).

Embedded in /usr/local/libexec/opencode-pty-supervisor and run by it. It is
the "other side of the wire" for the acceptance suite: an independent
implementation of TARGET-CONTRACT.md (sections 1-5).

Fault switches: /etc/opencode-reference/faults, one word per line ('#'
comments allowed), read once at start. Unknown words are logged and ignored.
  capacity17                 allow 17 sessions instead of 16
  limits-off-by-one          accept one more command byte, argument, argument byte, aggregate byte and second
  skip-pin-recheck           do not re-check pidfd/MainPID/InvocationID before start
  no-supplementary-groups-prop  omit SupplementaryGroups= from session units
  no-inaccessible-paths      omit InaccessiblePaths= from session units
  allow-no-pidfd             accept peers without SO_PEERPIDFD
  skip-cgroup-check          do not require the peer's ControlGroup
  accept-uid-while-stopped   while the peer unit's MainPID is stopped (state T in
                             /proc/<MainPID>/stat), accept any connecting process with the
                             service user's uid/gid as if it were the peer
  no-orphan-cleanup          do not stop leftover session units at start
  no-stop-on-disconnect      leave the unit running when the connection closes
  no-unauth-limit            no quota/rate limit for unauthenticated connections
  lockout-after-flood        once the quota or rate limit refuses a connection, refuse every
                             connection (the real peer too) for 60 s
  unbounded-output           buffer session output without bound while the client does not read
  debug-props                log every Exec*/Result change of session units
  omit-prop:NAME             omit property NAME (e.g. BindsTo, PrivateDevices) from session units
  exit-status-zero           report every session end as EXIT (0, 0)
  session-killmode-process   KillMode=process for session units (descendants outlive a stop)
  session-private-network    PrivateNetwork=yes for session units (no loopback to the servers)
  other-framing              every frame to the peer as u8 type + u32 little-endian length (a
                             supervisor that read PROTOCOL.md otherwise: HELLO_OK is not ours)
  unauth-rate-only           no quota on unauthenticated connections held at once: only the
                             token bucket, its burst the quota's 8 (a slow flood piles up)
  nul-check-from-second-byte the NUL check of START strings starts at their second byte
  orphans-binds-contains     orphan cleanup stops strict-name units whose BindsTo= contains the
                             supervisor, not only those bound to it alone
  exit-without-flush         once the unit has ended, drop the output not yet written to the
                             peer and send EXIT at once
  session-stop-no-grace      TimeoutStopUSec= 5 ms for session units (microseconds taken for
                             milliseconds): SIGKILL 5 ms after the SIGTERM of a stop
  session-stop-sigkill       KillSignal=SIGKILL for session units: a stop never sends SIGTERM
  no-signal-sender-check     believe systemd's signals (PropertiesChanged, JobRemoved) from any
                             sender, not only from the owner of org.freedesktop.systemd1
  no-end-confirmation        take a session's end from the signals alone, not confirmed by a
                             method call (with no-signal-sender-check: a forged PropertiesChanged
                             ends a live session with a forged EXIT)

Not a fault (the bench's what-if, `pty-acceptance bench --what-if WORD`; the
suite must still pass with it, and the fault catalogue never names it):
  session-stop-sendsighup    SendSIGHUP=yes for session units: right after the SIGTERM of a
                             stop, SIGHUP, which script(1) of the launcher does not catch:
                             it dies at once instead of sleeping 2 s after the SIGTERM

EXIT reporting: the unit's ExecMainCode/ExecMainStatus as systemd saw them
(script -e turns a command killed by signal N into exit status 128+N). When
the session was ended by a stop (STOP frame, disconnect, supervisor shutdown)
or by RuntimeMaxSec= (Result=timeout) and script(1) then exited 0, EXIT says
signal 15 (SIGTERM) rather than a clean exit.

Signals are forgeable (CONC-2): the bus delivers a signal addressed to our
unique name whatever our match rules say, its policy lets any local user send
one, and session unit names are public. A signal counts only when its sender
is the unique name that owns org.freedesktop.systemd1 (GetNameOwner at
connect, then NameOwnerChanged, believed only from the bus itself), and a
session's end is confirmed by a method call (Server.confirm_end) before EXIT
is sent or its slot freed.
"""

import array
import errno
import os
import pwd
import grp
import re
import secrets
import select
import selectors
import signal
import socket
import stat
import struct
import sys
import threading
import time
import traceback
from queue import Queue

from jeepney import DBusAddress, MatchRule, HeaderFields, new_method_call
from jeepney.bus_messages import message_bus
from jeepney.io.threading import open_dbus_router
from jeepney.wrappers import DBusErrorResponse, unwrap_msg

# ---------------------------------------------------------------- constants
SERVICE_USER = 'byk'
SERVICE_GROUP = 'byk'
PEER_UNIT = 'opencode-v2.service'
PEER_CGROUP = '/system.slice/opencode-v2.service'
SELF_UNIT = 'opencode-pty-supervisor.service'
SLICE = 'opencode-pty.slice'
LAUNCHER = '/usr/local/libexec/opencode-pty-launcher'
SOCK_DIR = '/run/opencode-pty'
SOCK_PATH = SOCK_DIR + '/supervisor.sock'
FAULTS_FILE = '/etc/opencode-reference/faults'
UNIT_PREFIX, UNIT_SUFFIX = 'opencode-pty-', '.service'   # a session unit: prefix, 32 hex digits, suffix
UNIT_RE = re.compile('^' + re.escape(UNIT_PREFIX) + '[0-9a-f]{32}' + re.escape(UNIT_SUFFIX) + '$')

SESSIONS = 16
MAX_CMD = 4096
MAX_ARGS = 128
MAX_ARG = 16384
MAX_AGG = 65536
MAX_RUNTIME = 3600
MAX_DATA = 32768
DBUS_TIMEOUT = 5.0
HELLO_TIMEOUT = 5.0
START_TIMEOUT = 30.0
STOP_TIMEOUT_USEC = 5_000_000
UNAUTH_QUOTA = 8            # concurrent unauthenticated connections
RATE_BURST = 32             # token bucket for new unauthenticated connections
RATE_PER_SEC = 16.0

T_HELLO, T_START, T_DATA, T_EOF, T_RESIZE, T_STOP = 1, 2, 3, 4, 5, 6
T_HELLO_OK, T_STARTED, T_DATA_OUT, T_EXIT, T_ERROR = 0x81, 0x82, 0x83, 0x84, 0x85
E_AUTH, E_PROTOCOL, E_LIMIT, E_CAPACITY, E_START_FAILED, E_RATE, E_INTERNAL = range(1, 8)
START_BOUND = 4 + 2 + 2 + 2 + (4 + MAX_CMD) + MAX_ARGS * 4 + MAX_AGG
IN_BOUNDS = {T_HELLO: (0, 0), T_START: (10, START_BOUND), T_DATA: (0, MAX_DATA),
             T_EOF: (0, 0), T_RESIZE: (4, 4), T_STOP: (0, 0)}
SO_PEERPIDFD = 77
ANCBUF = socket.CMSG_SPACE(16 * 4)

SD = 'org.freedesktop.systemd1'
SD_PATH = '/org/freedesktop/systemd1'
MGR = SD + '.Manager'
UNIT_IF = SD + '.Unit'
SERVICE_IF = SD + '.Service'
PROPS_IF = 'org.freedesktop.DBus.Properties'
BUS_NAME = 'org.freedesktop.DBus'     # the bus itself: the sender of its own signals
WRITE_TIMEOUT = 5.0     # once a session is over: a peer that takes no byte for this long is given up
OUTPUT_IDLE = 2.0       # once it is over: how long the PTY may give nothing before EXIT goes without its end


def log(*a):
    print('opencode-pty-supervisor:', *a, file=sys.stderr, flush=True)


def read_faults():
    words = set()
    try:
        with open(FAULTS_FILE) as f:
            for line in f:
                w = line.split('#', 1)[0].strip()
                if w:
                    words.add(w)
    except FileNotFoundError:
        pass
    except OSError as e:
        log('cannot read', FAULTS_FILE, e)
    for w in os.environ.get('OPENCODE_PTY_FAULTS', '').split():
        words.add(w)
    if words:
        log('FAULTS ACTIVE:', ' '.join(sorted(words)))
    return words


FAULTS = read_faults()
if 'limits-off-by-one' in FAULTS:
    MAX_CMD, MAX_ARGS, MAX_ARG, MAX_AGG, MAX_RUNTIME = (x + 1 for x in (MAX_CMD, MAX_ARGS, MAX_ARG, MAX_AGG, MAX_RUNTIME))


class Reject(Exception):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code
        self.msg = msg


class PeerGone(Exception):
    pass


def session_id(unit):
    """The 32 hex digits that name a session unit (without UNIT_PREFIX and UNIT_SUFFIX)."""
    return unit[len(UNIT_PREFIX):len(unit) - len(UNIT_SUFFIX)]


def is_orphan(name, binds):
    """A unit the orphan cleanup stops: strict name, BindsTo= exactly this
    supervisor (bound to it and to anything else as well: not ours to stop)."""
    return bool(UNIT_RE.match(name)) and list(binds) == [SELF_UNIT]


def unit_path(name):
    out = []
    for ch in name:
        if ch.isalnum() and ch.isascii():
            out.append(ch)
        else:
            out.append('_%02x' % ord(ch))
    return SD_PATH + '/unit/' + ''.join(out)


# ------------------------------------------------------------------- D-Bus
class Bus:
    def __init__(self, connect=True):
        self.sigq = Queue()
        self.lock = threading.Lock()
        self.by_path = {}
        self.by_unit = {}
        self.sd_owner = None    # the unique name that owns org.freedesktop.systemd1
        self.dropped = 0        # signals from other senders
        if not connect:         # the tests' bus: they call handle() themselves
            return
        self._cm = open_dbus_router(bus='SYSTEM', enable_fds=True)
        self.router = self._cm.__enter__()
        # who owns systemd's name: watched before it is asked, so no change is missed
        owner_rule = MatchRule(type='signal', sender=BUS_NAME, interface=BUS_NAME, member='NameOwnerChanged')
        owner_rule.add_arg_condition(0, SD)
        self.call_msg(message_bus.AddMatch(owner_rule))
        self.router.filter(MatchRule(type='signal', interface=BUS_NAME, member='NameOwnerChanged'),
                           queue=self.sigq)
        (owner,) = self.call_msg(message_bus.GetNameOwner(SD))
        self.set_owner(owner)
        rules = [
            dict(type='signal', interface=PROPS_IF, member='PropertiesChanged',
                 path_namespace=SD_PATH + '/unit'),
            dict(type='signal', interface=MGR, member='JobRemoved', path=SD_PATH),
        ]
        for r in rules:
            # sender= only in the bus-side rule: signals carry the unique name,
            # checked in handle(); the client-side filter lets through any
            # signal addressed to us, whoever sent it
            self.call_msg(message_bus.AddMatch(MatchRule(sender=SD, **r)))
            self.router.filter(MatchRule(**r), queue=self.sigq)
        self.manager('Subscribe', '', ())
        threading.Thread(target=self._dispatch, daemon=True, name='signals').start()

    def set_owner(self, owner):
        with self.lock:
            self.sd_owner = owner or None
        log(SD, 'is owned by', repr(owner) + ': its signals are the only ones believed')

    def from_systemd(self, sender):
        if 'no-signal-sender-check' in FAULTS:
            return True
        with self.lock:
            return self.sd_owner is not None and sender == self.sd_owner

    def _drop(self, what, sender):
        self.dropped += 1
        if self.dropped <= 20 or self.dropped % 1000 == 0:
            log('dropped', what, 'from', repr(sender) + ': not', SD + "'s owner", repr(self.sd_owner),
                '(%d dropped so far)' % self.dropped)

    def alive(self):
        return self.router._rcv_thread.is_alive()

    def call_msg(self, msg, timeout=DBUS_TIMEOUT):
        reply = self.router.send_and_get_reply(msg, timeout=timeout)
        return unwrap_msg(reply)

    def call(self, path, iface, method, sig, body, timeout=DBUS_TIMEOUT):
        addr = DBusAddress(path, bus_name=SD, interface=iface)
        return self.call_msg(new_method_call(addr, method, sig, body), timeout)

    def manager(self, method, sig, body, timeout=DBUS_TIMEOUT):
        return self.call(SD_PATH, MGR, method, sig, body, timeout)

    def get_all(self, path, iface):
        (d,) = self.call(path, PROPS_IF, 'GetAll', 's', (iface,))
        return {k: v[1] for k, v in d.items()}

    def get(self, path, iface, name):
        (v,) = self.call(path, PROPS_IF, 'Get', 'ss', (iface, name))
        return v[1]

    def register(self, sess):
        with self.lock:
            self.by_path[sess.path] = sess
            self.by_unit[sess.unit] = sess

    def unregister(self, sess):
        with self.lock:
            self.by_path.pop(sess.path, None)
            self.by_unit.pop(sess.unit, None)

    def sync(self, timeout=DBUS_TIMEOUT):
        """Wait until the signal thread has handled every signal received so
        far. The router queues signals in arrival order, so after a reply
        (e.g. GetUnit -> NoSuchUnit) this drains the PropertiesChanged that
        systemd sent before it (the final ExecMain*/Result/ActiveState)."""
        done = threading.Event()
        self.sigq.put(done)
        return done.wait(timeout)

    def _dispatch(self):
        while True:
            msg = self.sigq.get()
            if isinstance(msg, threading.Event):
                msg.set()
                continue
            try:
                self.handle(msg)
            except Exception:
                log('signal dispatch error', traceback.format_exc())

    def handle(self, msg):
        """One signal, in arrival order: believed only from systemd's owner,
        and only in the signature systemd sends it with."""
        fields = msg.header.fields
        member, sender = fields.get(HeaderFields.member), fields.get(HeaderFields.sender)
        signature = fields.get(HeaderFields.signature, '')
        if member == 'NameOwnerChanged':
            # only the bus says who owns a name (it stamps every sender: nobody else sends as it)
            if sender != BUS_NAME:
                self._drop('NameOwnerChanged', sender)
            elif signature != 'sss':
                log('malformed NameOwnerChanged: signature', repr(signature))
            elif msg.body[0] == SD:
                self.set_owner(msg.body[2])
            return
        if member not in ('PropertiesChanged', 'JobRemoved'):
            return
        if not self.from_systemd(sender):
            self._drop(member, sender)
            return
        if member == 'PropertiesChanged':
            if signature != 'sa{sv}as':
                log('malformed PropertiesChanged: signature', repr(signature))
                return
            path = fields.get(HeaderFields.path)
            with self.lock:
                sess = self.by_path.get(path)
            if sess is not None:
                iface, changed, _inv = msg.body
                sess.on_props(iface, changed)
        else:
            if signature != 'uoss':
                log('malformed JobRemoved: signature', repr(signature))
                return
            _id, job, unit, result = msg.body
            with self.lock:
                sess = self.by_unit.get(unit)
            if sess is not None:
                sess.on_job(job, result)


# ------------------------------------------------------------ session state
class UnitState:
    """What the PropertiesChanged/JobRemoved signals told us about one unit."""

    def __init__(self, unit, wake_w):
        self.unit = unit
        self.path = unit_path(unit)
        self.wake_w = wake_w
        self.cv = threading.Condition()
        self.active_state = None
        self.seen_running = False
        self.job_result = None
        self.exec_code = 0      # CLD_EXITED=1, CLD_KILLED=2, CLD_DUMPED=3
        self.exec_status = 0
        self.result = None
        self.signalled = False  # the signals said it went inactive or failed after running
        self.ended = False      # confirmed by a method call (Server.confirm_end)
        self.gone = False       # confirmed unloaded (NoSuchUnit)
        self.stop_requested = False
        self.unreadable = []    # exit properties of another type than systemd's: no EXIT is made of them

    def _wake(self):
        self.cv.notify_all()
        try:
            os.write(self.wake_w, b'x')
        except OSError:
            pass

    def on_props(self, iface, ch):
        """ch: {name: (D-Bus signature, value)} as jeepney gives a{sv}; a value
        of another type than systemd's is never read as one (fail closed)."""
        def typed(name, sig):
            if ch[name][0] != sig:
                return None, '%s: D-Bus type %r, expected %r' % (name, ch[name][0], sig)
            return ch[name][1], None

        with self.cv:
            if iface == UNIT_IF and 'ActiveState' in ch:
                st, err = typed('ActiveState', 's')
                if err:
                    log(self.unit, err, '(ignored)')
                else:
                    self.active_state = st
                    if st in ('activating', 'active', 'deactivating', 'reloading'):
                        self.seen_running = True
                    elif st in ('inactive', 'failed') and self.seen_running:
                        self.signalled = True
                        if 'no-end-confirmation' in FAULTS:
                            self.ended = True
            if iface == SERVICE_IF:
                if 'debug-props' in FAULTS:
                    log('props', self.unit, {k: v for k, v in ch.items() if k.startswith(('Exec', 'Result'))})
                for name, sig, attr in (('ExecMainCode', 'i', 'exec_code'), ('ExecMainStatus', 'i', 'exec_status'),
                                        ('Result', 's', 'result')):
                    if name in ch:
                        value, err = typed(name, sig)
                        if err:
                            self.unreadable.append(err)
                        else:
                            setattr(self, attr, value)
            self._wake()

    def end_hinted(self):
        """The signals say the unit has ended, not yet confirmed."""
        with self.cv:
            return not self.ended and (self.signalled or self.active_state in ('inactive', 'failed'))

    def summary(self):
        with self.cv:
            return 'state %s result %s exec %s %s' % (self.active_state, self.result, self.exec_code,
                                                      self.exec_status)

    def on_job(self, job, result):
        with self.cv:
            if self.job_result is not None:
                return
            self.job_result = result
            if result == 'done':
                self.seen_running = True
                if self.active_state in ('inactive', 'failed'):
                    # possibly coalesced; the relay loop confirms via GetUnit
                    pass
            self._wake()

    def exit_pair(self):
        """EXIT's (exit_code, signal). Raises Reject (INTERNAL) when an exit
        property came in another type than systemd's: no EXIT is made up."""
        if 'exit-status-zero' in FAULTS:
            return 0, 0
        if self.unreadable:
            raise Reject(E_INTERNAL, 'exit status unreadable: %s' % '; '.join(self.unreadable))
        if self.exec_code in (2, 3):
            return 0, self.exec_status
        if self.exec_status == 0 and (self.stop_requested or self.result == 'timeout'):
            return 0, signal.SIGTERM.value
        return self.exec_status, 0


# --------------------------------------------------------------- the server
class Server:
    def __init__(self):
        self.user = pwd.getpwnam(SERVICE_USER)
        self.gid = grp.getgrnam(SERVICE_GROUP).gr_gid
        self.capacity = 17 if 'capacity17' in FAULTS else SESSIONS
        self.lock = threading.Lock()
        self.slots = 0
        self.unauth = 0
        self.tokens = float(RATE_BURST)
        self.token_t = time.monotonic()
        self.locked_until = 0.0
        self.conns = set()
        self.known_mainpid = 0
        self.stopping = False
        self.bus = Bus()

    # admission ---------------------------------------------------------
    def admit_unauth(self):
        if 'no-unauth-limit' in FAULTS:
            with self.lock:
                self.unauth += 1
            return None
        with self.lock:
            now = time.monotonic()
            burst = UNAUTH_QUOTA if 'unauth-rate-only' in FAULTS else RATE_BURST
            self.tokens = min(burst, self.tokens + (now - self.token_t) * RATE_PER_SEC)
            self.token_t = now
            if now < self.locked_until:
                return 'locked out after a flood'
            why = None
            if self.unauth >= UNAUTH_QUOTA and 'unauth-rate-only' not in FAULTS:
                why = 'too many unauthenticated connections'
            elif self.tokens < 1.0:
                why = 'connection rate limit'
            if why:
                if 'lockout-after-flood' in FAULTS:
                    self.locked_until = now + 60.0
                return why
            self.tokens -= 1.0
            self.unauth += 1
            return None

    def release_unauth(self):
        with self.lock:
            self.unauth -= 1

    def take_slot(self):
        with self.lock:
            if self.slots >= self.capacity:
                return False
            self.slots += 1
            return True

    def release_slot(self):
        with self.lock:
            self.slots -= 1

    # peer authentication ------------------------------------------------
    def authenticate(self, pid, uid, gid, pidfd):
        """(unit path, InvocationID, the pid to pin) of an accepted peer. Raises Reject."""
        if 'accept-uid-while-stopped' in FAULTS:
            stand_in = self.stopped_peer(pid, uid, gid)
            if stand_in is not None:
                return stand_in
        bus = self.bus
        try:
            (upath,) = bus.manager('GetUnitByPID', 'u', (pid,))
            u = bus.get_all(upath, UNIT_IF)
            s = bus.get_all(upath, SERVICE_IF)
        except DBusErrorResponse as e:
            raise Reject(E_AUTH, 'peer is not in a known unit (%s)' % e.name)
        except TimeoutError:
            raise Reject(E_AUTH, 'D-Bus deadline exceeded during authentication')
        if u.get('Id') != PEER_UNIT:
            raise Reject(E_AUTH, 'peer unit is not ' + PEER_UNIT)
        if s.get('MainPID') != pid:
            raise Reject(E_AUTH, 'peer is not the MainPID of ' + PEER_UNIT)
        if u.get('ActiveState') != 'active' or u.get('SubState') != 'running':
            raise Reject(E_AUTH, 'peer unit is not active/running')
        if s.get('ControlGroup') != PEER_CGROUP and 'skip-cgroup-check' not in FAULTS:
            raise Reject(E_AUTH, 'peer ControlGroup is not ' + PEER_CGROUP)
        inv = bytes(u.get('InvocationID') or b'')
        if len(inv) != 16:
            raise Reject(E_AUTH, 'peer has no 16-byte InvocationID')
        if uid != self.user.pw_uid or gid != self.gid:
            raise Reject(E_AUTH, 'peer uid/gid is not %s:%s' % (SERVICE_USER, SERVICE_GROUP))
        if pidfd is not None and not pidfd_alive(pidfd):
            raise Reject(E_AUTH, 'peer exited during authentication')
        self.known_mainpid = pid
        return upath, inv, pid

    def stopped_peer(self, pid, uid, gid):
        """Fault accept-uid-while-stopped: while the peer's MainPID is stopped, a
        process of the service user passes for it (pinned as that MainPID)."""
        if uid != self.user.pw_uid or gid != self.gid:
            return None
        try:
            (upath,) = self.bus.manager('GetUnit', 's', (PEER_UNIT,))
            mainpid = self.bus.get(upath, SERVICE_IF, 'MainPID')
            inv = bytes(self.bus.get(upath, UNIT_IF, 'InvocationID'))
            with open('/proc/%d/stat' % mainpid, 'rb') as f:
                state = f.read(4096).rsplit(b')', 1)[1].split()[0]
        except (DBusErrorResponse, TimeoutError, OSError, IndexError):
            return None
        if mainpid <= 0 or state != b'T':
            return None
        log('fault: accepting pid', pid, 'while MainPID', mainpid, 'is stopped')
        return upath, inv, mainpid

    def recheck(self, pin):
        if 'skip-pin-recheck' in FAULTS:
            return
        upath, pid, pidfd, inv = pin
        if pidfd is not None and not pidfd_alive(pidfd):
            raise Reject(E_AUTH, 'authenticated peer has exited')
        try:
            (cur,) = self.bus.manager('GetUnit', 's', (PEER_UNIT,))
            mainpid = self.bus.get(cur, SERVICE_IF, 'MainPID')
            cinv = bytes(self.bus.get(cur, UNIT_IF, 'InvocationID'))
        except DBusErrorResponse as e:
            raise Reject(E_AUTH, 'peer unit vanished (%s)' % e.name)
        except TimeoutError:
            raise Reject(E_AUTH, 'D-Bus deadline exceeded during pin re-check')
        if mainpid != pid:
            raise Reject(E_AUTH, 'peer MainPID changed since authentication')
        if cinv != inv:
            raise Reject(E_AUTH, 'peer InvocationID changed since authentication')
        if pidfd is not None and not pidfd_alive(pidfd):
            raise Reject(E_AUTH, 'authenticated peer has exited')

    # session unit ---------------------------------------------------------
    def unit_props(self, unit, argv, runtime, pty_fd, cwd_fd, rows=0, cols=0):
        enc = ['a' + b64(a.encode()) for a in argv]
        env = ['PATH=/usr/local/bin:/usr/bin:/bin', 'HOME=' + (self.user.pw_dir or '/'),
               'TERM=xterm-256color', 'LANG=C.UTF-8']
        if rows and cols:
            # read (and dropped) by the launcher, which sizes the PTY before execve
            env.append('OPENCODE_PTY_WINSIZE=%dx%d' % (rows, cols))
        p = [
            ('Description', ('s', 'opencode PTY session ' + session_id(unit))),
            ('Type', ('s', 'exec')),
            ('ExecStart', ('a(sasb)', [(LAUNCHER, [LAUNCHER] + enc, False)])),
            ('Slice', ('s', SLICE)),
            ('BindsTo', ('as', [SELF_UNIT])),
            ('After', ('as', [SELF_UNIT])),
            ('User', ('s', SERVICE_USER)),
            ('Group', ('s', SERVICE_GROUP)),
            ('CapabilityBoundingSet', ('t', 0)),
            ('AmbientCapabilities', ('t', 0)),
            ('NoNewPrivileges', ('b', True)),
            ('PrivateDevices', ('b', True)),
            ('DevicePolicy', ('s', 'closed')),
            ('Delegate', ('b', False)),
            ('ProtectProc', ('s', 'invisible')),
            ('ProcSubset', ('s', 'pid')),
            ('RestrictNamespaces', ('t', 0)),
            ('RestrictAddressFamilies', ('(bas)', (True, ['AF_UNIX', 'AF_INET', 'AF_INET6']))),
            ('SystemCallArchitectures', ('as', ['native'])),
            ('SystemCallFilter', ('(bas)', (True, ['@system-service']))),
            ('ProtectSystem', ('s', 'full')),
            ('PrivateTmp', ('b', True)),
            ('ProtectKernelTunables', ('b', True)),
            ('ProtectKernelModules', ('b', True)),
            ('ProtectKernelLogs', ('b', True)),
            ('ProtectControlGroups', ('b', True)),
            ('LockPersonality', ('b', True)),
            ('RestrictSUIDSGID', ('b', True)),
            ('RestrictRealtime', ('b', True)),
            ('Environment', ('as', env)),
            ('RuntimeMaxUSec', ('t', runtime * 1_000_000)),
            ('KillMode', ('s', 'process' if 'session-killmode-process' in FAULTS else 'control-group')),
            ('TimeoutStopUSec', ('t', STOP_TIMEOUT_USEC // 1000 if 'session-stop-no-grace' in FAULTS
                                    else STOP_TIMEOUT_USEC)),
            ('StandardInputFileDescriptor', ('h', pty_fd)),
            ('StandardOutputFileDescriptor', ('h', pty_fd)),
            ('StandardErrorFileDescriptor', ('h', cwd_fd)),
            ('CollectMode', ('s', 'inactive-or-failed')),
        ]
        if 'session-stop-sendsighup' in FAULTS:
            p.append(('SendSIGHUP', ('b', True)))
        if 'session-private-network' in FAULTS:
            p.append(('PrivateNetwork', ('b', True)))
        if 'session-stop-sigkill' in FAULTS:
            p.append(('KillSignal', ('i', int(signal.SIGKILL))))
        if 'no-supplementary-groups-prop' not in FAULTS:
            p.append(('SupplementaryGroups', ('as', [])))
        if 'no-inaccessible-paths' not in FAULTS:
            p.append(('InaccessiblePaths', ('as', [SOCK_DIR, '-/run/docker.sock', '-/run/dbus', '-/run/user'])))
        omit = {w.split(':', 1)[1] for w in FAULTS if w.startswith('omit-prop:')}
        return [x for x in p if x[0] not in omit]

    def unit_gone(self, unit):
        try:
            self.bus.manager('GetUnit', 's', (unit,))
            return False
        except DBusErrorResponse as e:
            if e.name == 'org.freedesktop.systemd1.NoSuchUnit':
                return True
            raise

    def active_state(self, path):
        sig, value = self.bus.call(path, PROPS_IF, 'Get', 'ss', (UNIT_IF, 'ActiveState'))[0]
        if sig != 's':
            raise ValueError('ActiveState: D-Bus type %r' % sig)
        return value

    def confirm_end(self, st):
        """Ask systemd whether the unit has ended (no longer loaded, or
        inactive/failed) and record the answer: what the signals said is a
        hint, never the decision. False when it cannot be read."""
        with st.cv:
            if st.ended:
                return True
        try:
            state = 'gone' if self.unit_gone(st.unit) else self.active_state(st.path)
        except DBusErrorResponse as e:
            state = 'gone' if e.name == 'org.freedesktop.DBus.Error.UnknownObject' else None
        except Exception:   # a deadline, a reply of another type: not confirmed
            state = None
        with st.cv:
            if state in ('gone', 'inactive', 'failed'):
                st.ended = True
            elif state is not None:
                if st.signalled:
                    log(st.unit + ': the signals said it ended, systemd says', state + ': not ended')
                st.active_state, st.signalled = state, False
            return st.ended

    def stop_and_wait(self, st, cgroup, timeout=20.0):
        """Stop a session unit and wait until it and its cgroup are gone.
        Returns True when confirmed gone; logs CLEANUP-ERROR otherwise."""
        deadline = time.monotonic() + timeout
        try:
            self.bus.manager('StopUnit', 'ss', (st.unit, 'replace'))
        except DBusErrorResponse as e:
            if e.name not in ('org.freedesktop.systemd1.NoSuchUnit',):
                log('CLEANUP-ERROR StopUnit', st.unit, e.name, e.data)
        except TimeoutError:
            log('CLEANUP-ERROR StopUnit deadline', st.unit)
        ok = self.wait_gone(st, cgroup, deadline)
        if not ok:
            log('CLEANUP-ERROR unit still present, sending SIGKILL', st.unit)
            try:
                self.bus.manager('KillUnit', 'ssi', (st.unit, 'all', 9))
            except Exception as e:
                log('CLEANUP-ERROR KillUnit', st.unit, e)
            ok = self.wait_gone(st, cgroup, time.monotonic() + 5.0)
            if not ok:
                log('CLEANUP-ERROR unit could not be removed', st.unit)
        return ok

    def wait_gone(self, st, cgroup, deadline):
        while time.monotonic() < deadline:
            with st.cv:
                if not st.ended:
                    st.cv.wait(timeout=0.05)
            gone = self.confirm_end(st)
            if gone and not cgroup_exists(cgroup):
                return True
            if gone:
                time.sleep(0.005)
        return False

    # orphan cleanup -----------------------------------------------------
    def cleanup_orphans(self):
        if 'no-orphan-cleanup' in FAULTS:
            log('orphan cleanup disabled by fault switch')
            return
        try:
            (units,) = self.bus.manager('ListUnitsByPatterns', 'asas', ([], ['opencode-pty-*.service']))
        except Exception as e:
            log('CLEANUP-ERROR ListUnitsByPatterns', e)
            return
        waits = []
        for u in units:
            name, path = u[0], u[6]
            if not UNIT_RE.match(name):
                continue
            try:
                binds = list(self.bus.get(path, UNIT_IF, 'BindsTo'))
            except Exception as e:
                log('CLEANUP-ERROR reading BindsTo of', name, e)
                continue
            orphan = is_orphan(name, binds)
            if 'orphans-binds-contains' in FAULTS:
                orphan = SELF_UNIT in binds
            if not orphan:
                log('leaving', name, 'alone: BindsTo', binds)
                continue
            log('stopping orphan session unit', name)
            st = UnitState(name, -1)
            self.bus.register(st)
            try:
                cg = self.bus.get(path, SERVICE_IF, 'ControlGroup')
            except Exception:
                cg = ''
            try:
                self.bus.manager('StopUnit', 'ss', (name, 'replace'))
            except Exception as e:
                log('CLEANUP-ERROR StopUnit', name, e)
            waits.append((st, cg))
        for st, cg in waits:
            ok = self.wait_gone(st, cg, time.monotonic() + 15.0)
            if not ok:
                try:
                    self.bus.manager('ResetFailedUnit', 's', (st.unit,))
                except Exception:
                    pass
                ok = self.wait_gone(st, cg, time.monotonic() + 1.0)
            self.bus.unregister(st)
            if not ok:
                log('CLEANUP-ERROR orphan unit not removed', st.unit)

    # listener ---------------------------------------------------------
    def listen(self):
        os.makedirs(SOCK_DIR, mode=0o750, exist_ok=True)
        os.chown(SOCK_DIR, 0, self.gid)
        os.chmod(SOCK_DIR, 0o750)
        try:
            os.unlink(SOCK_PATH)
        except FileNotFoundError:
            pass
        ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old = os.umask(0o177)
        try:
            ls.bind(SOCK_PATH)
        finally:
            os.umask(old)
        os.chown(SOCK_PATH, 0, self.gid)
        os.chmod(SOCK_PATH, 0o660)
        ls.listen(128)
        self.ls = ls

    def serve(self):
        while not self.stopping:
            try:
                c, _ = self.ls.accept()
            except OSError as e:
                if self.stopping:
                    break
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    time.sleep(0.05)
                continue
            try:
                cpid = struct.unpack('3i', c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
            except OSError:
                cpid = -1
            # The last authenticated MainPID skips the unauthenticated quota
            # (it is still fully authenticated), so a flood by other processes
            # cannot lock the real peer out.
            bypass = cpid > 0 and cpid == self.known_mainpid
            why = None if bypass else self.admit_unauth()
            if why is not None:
                try:
                    c.setblocking(False)
                    c.send(frame(T_ERROR, struct.pack('>H', E_RATE) + why.encode()))
                except OSError:
                    pass
                c.close()
                continue
            conn = Conn(self, c)
            conn.unauth = not bypass
            with self.lock:
                self.conns.add(conn)
            threading.Thread(target=conn.run, daemon=True).start()

    def shutdown(self):
        self.stopping = True
        try:
            os.unlink(SOCK_PATH)
        except OSError:
            pass
        try:
            self.ls.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            c.request_stop()
        deadline = time.monotonic() + 12.0
        for c in conns:
            c.done.wait(max(0.0, deadline - time.monotonic()))


# ---------------------------------------------------------------- helpers
def b64(b):
    import base64
    return base64.urlsafe_b64encode(b).decode().rstrip('=')


def frame(t, payload=b''):
    if 'other-framing' in FAULTS:  # another reading of PROTOCOL.md: type first, little-endian length
        return struct.pack('<BI', t, len(payload)) + payload
    return struct.pack('>IB', len(payload), t) + payload


def pidfd_alive(fd):
    p = select.poll()
    p.register(fd, select.POLLIN)
    return not p.poll(0)


def cgroup_exists(cg):
    if not cg:
        return False
    return os.path.isdir('/sys/fs/cgroup' + cg)


def resize_session(cgroup, rows, cols):
    """Apply a RESIZE: open the PTY through /proc/<pid>/fd/0 of a session
    process that has a terminal there and TIOCSWINSZ it; the kernel sends
    SIGWINCH to the foreground process group. Needs CAP_SYS_PTRACE (other
    user's /proc fd links) and CAP_DAC_OVERRIDE (the pts is the user's, 0620).
    pidfd_getfd would need no device access but systemd-nspawn's seccomp
    filter refuses it on the reference host. Best effort, never fatal."""
    if not cgroup or rows == 0 or cols == 0:
        return False
    import fcntl
    import termios
    try:
        with open('/sys/fs/cgroup' + cgroup + '/cgroup.procs') as f:
            pids = [int(x) for x in f.read().split()]
    except OSError:
        return False
    errs = []
    for pid in pids:
        try:
            fd = os.open('/proc/%d/fd/0' % pid, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as e:
            errs.append('%d: %s' % (pid, e.strerror))
            continue
        try:
            if os.isatty(fd):
                fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack('HHHH', rows, cols, 0, 0))
                return True
        except OSError as e:
            errs.append('%d: %s' % (pid, e.strerror))
        finally:
            os.close(fd)
    log('RESIZE: no process with a terminal in', cgroup, errs)
    return False


def sd_notify(msg):
    addr = os.environ.get('NOTIFY_SOCKET')
    if not addr:
        return
    if addr.startswith('@'):
        addr = '\0' + addr[1:]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
    try:
        s.connect(addr)
        s.send(msg.encode())
    finally:
        s.close()


def valid_text(b):
    if 'nul-check-from-second-byte' in FAULTS:
        if b.find(b'\0') > 0:
            return False
    elif b'\0' in b:
        return False
    try:
        b.decode('utf-8', 'strict')
    except UnicodeDecodeError:
        return False
    return True


def parse_start(p):
    """START payload -> (runtime, rows, cols, argv). Raises Reject."""
    if len(p) < 10:
        raise Reject(E_PROTOCOL, 'START too short')
    runtime, rows, cols, argc = struct.unpack_from('>IHHH', p, 0)
    off = 10
    items = []
    for i in range(argc):
        if off + 4 > len(p):
            raise Reject(E_PROTOCOL, 'START argc does not match payload length')
        (n,) = struct.unpack_from('>I', p, off)
        off += 4
        if off + n > len(p):
            raise Reject(E_PROTOCOL, 'START argument length does not match payload length')
        items.append(p[off:off + n])
        off += n
    if off != len(p):
        raise Reject(E_PROTOCOL, 'START has trailing bytes')
    if argc < 1:
        raise Reject(E_PROTOCOL, 'START without a command')
    cmd, args = items[0], items[1:]
    if len(cmd) > MAX_CMD:
        raise Reject(E_LIMIT, 'command longer than %d bytes' % MAX_CMD)
    if len(args) > MAX_ARGS:
        raise Reject(E_LIMIT, 'more than %d arguments' % MAX_ARGS)
    for a in args:
        if len(a) > MAX_ARG:
            raise Reject(E_LIMIT, 'argument longer than %d bytes' % MAX_ARG)
    if sum(len(a) for a in args) > MAX_AGG:
        raise Reject(E_LIMIT, 'arguments longer than %d bytes in total' % MAX_AGG)
    if runtime < 1 or runtime > MAX_RUNTIME:
        raise Reject(E_LIMIT, 'runtime must be 1..%d seconds' % MAX_RUNTIME)
    for it in items:
        if not valid_text(it):
            raise Reject(E_PROTOCOL, 'argument is not UTF-8 without NUL')
    if len(cmd) == 0:
        raise Reject(E_PROTOCOL, 'empty command')
    return runtime, rows, cols, [it.decode() for it in items]


class FrameReader:
    """Incremental reader of helper->supervisor frames on a non-blocking
    socket. Each recvmsg asks for at most the rest of the current header or
    payload, so descriptors are attributed to the frame they came with."""

    def __init__(self, sock):
        self.sock = sock
        self.reset()

    def reset(self):
        self.hdr = b''
        self.body = None
        self.need = 0
        self.type = None
        self.fds = []
        self.ctrunc = False

    def close_fds(self):
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []

    def poll(self):
        """Return (type, payload, fds, ctrunc), None if more data is needed.
        Raises EOFError at end of stream, Reject on a protocol error."""
        while True:
            if self.body is None:
                want = 5 - len(self.hdr)
            else:
                want = self.need - len(self.body)
            if want == 0:
                out = (self.type, bytes(self.body), self.fds, self.ctrunc)
                self.fds = []
                self.reset()
                return out
            try:
                data, anc, flags, _ = self.sock.recvmsg(want, ANCBUF, socket.MSG_CMSG_CLOEXEC)
            except (BlockingIOError, InterruptedError):
                return None
            except (ConnectionResetError, BrokenPipeError):
                raise EOFError
            for lvl, typ, d in anc:
                if lvl == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                    a = array.array('i')
                    a.frombytes(d[:len(d) - len(d) % a.itemsize])
                    self.fds.extend(a)
            if flags & socket.MSG_CTRUNC:
                self.ctrunc = True
            if not data:
                if self.hdr or self.body is not None:
                    raise Reject(E_PROTOCOL, 'connection closed inside a frame')
                raise EOFError
            if self.body is None:
                self.hdr += data
                if len(self.hdr) == 5:
                    n, t = struct.unpack('>IB', self.hdr)
                    if t not in IN_BOUNDS:
                        if t in (T_HELLO_OK, T_STARTED, T_DATA_OUT, T_EXIT, T_ERROR):
                            raise Reject(E_PROTOCOL, 'frame type 0x%02x in the wrong direction' % t)
                        raise Reject(E_PROTOCOL, 'unknown frame type 0x%02x' % t)
                    lo, hi = IN_BOUNDS[t]
                    if n > hi or n < lo:
                        raise Reject(E_PROTOCOL, 'frame type 0x%02x with bad length %d' % (t, n))
                    self.type, self.need, self.body = t, n, bytearray()
            else:
                self.body += data


# ----------------------------------------------------------- a connection
class Conn:
    def __init__(self, server, sock):
        self.srv = server
        self.sock = sock
        self.sock.setblocking(False)
        self.reader = FrameReader(sock)
        self.done = threading.Event()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.stop_requested = False
        self.pidfd = None
        self.unauth = True
        self.slot = False
        self.st = None
        self.cgroup = ''
        self.pty = None
        self.unit_started = False
        self.sel = None

    def request_stop(self):
        self.stop_requested = True
        try:
            os.write(self.wake_w, b's')
        except OSError:
            pass

    # low-level I/O -----------------------------------------------------
    def wait_frame(self, deadline):
        while True:
            f = self.reader.poll()
            if f is not None:
                return f
            left = deadline - time.monotonic()
            if left <= 0 or self.stop_requested:
                raise Reject(E_PROTOCOL, 'timed out waiting for a frame')
            p = select.poll()
            p.register(self.sock, select.POLLIN)
            p.register(self.wake_r, select.POLLIN)
            p.poll(left * 1000)

    def send_now(self, data, timeout=5.0):
        deadline = time.monotonic() + timeout
        view = memoryview(data)
        while view:
            try:
                n = self.sock.send(view)
                view = view[n:]
            except (BlockingIOError, InterruptedError):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PeerGone()
                p = select.poll()
                p.register(self.sock, select.POLLOUT)
                p.poll(left * 1000)
            except OSError:
                raise PeerGone()

    def send_error(self, code, msg):
        try:
            self.send_now(frame(T_ERROR, struct.pack('>H', code) + msg.encode()[:1000]), 1.0)
        except PeerGone:
            pass

    # main ----------------------------------------------------------------
    def run(self):
        try:
            self.handle()
        except Reject as r:
            log('reject', r.code, r.msg)
            self.send_error(r.code, r.msg)
        except (PeerGone, EOFError):
            pass
        except Exception:
            log('internal error', traceback.format_exc())
            self.send_error(E_INTERNAL, 'internal error')
        finally:
            self.finish()

    def finish(self):
        try:
            self.reader.close_fds()
            if self.st is not None and self.unit_started:
                if 'no-stop-on-disconnect' in FAULTS and not self.srv.stopping:
                    log('fault: leaving', self.st.unit, 'running after disconnect')
                else:
                    ok = self.srv.stop_and_wait(self.st, self.cgroup)
                    if not ok:
                        self.slot = False  # fail closed: the slot stays taken
            if self.st is not None:
                self.srv.bus.unregister(self.st)
        except Exception:
            log('CLEANUP-ERROR', traceback.format_exc())
        finally:
            for fd in (self.sel, self.pty, self.sock):
                try:
                    if fd is not None:
                        fd.close()
                except OSError:
                    pass
            for fd in (self.pidfd, self.wake_r, self.wake_w):
                try:
                    if fd is not None:
                        os.close(fd)
                except OSError:
                    pass
            if self.unauth:
                self.srv.release_unauth()
            if self.slot:
                self.srv.release_slot()
            with self.srv.lock:
                self.srv.conns.discard(self)
            self.done.set()

    def handle(self):
        srv = self.srv
        pid, uid, gid = struct.unpack('3i', self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        try:
            self.pidfd = struct.unpack('i', self.sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD, 4))[0]
        except OSError as e:
            if 'allow-no-pidfd' not in FAULTS:
                raise Reject(E_AUTH, 'SO_PEERPIDFD unavailable (%s)' % e.strerror)
        t, payload, fds, ctr = self.wait_frame(time.monotonic() + HELLO_TIMEOUT)
        if fds or ctr:
            self.reader.fds = fds
            raise Reject(E_PROTOCOL, 'descriptors on a non-START frame')
        if t != T_HELLO:
            raise Reject(E_PROTOCOL, 'first frame must be HELLO')
        upath, inv, pinned = srv.authenticate(pid, uid, gid, self.pidfd)
        if self.unauth:
            srv.release_unauth()
            self.unauth = False
        if not srv.take_slot():
            raise Reject(E_CAPACITY, 'all %d session slots are in use' % srv.capacity)
        self.slot = True
        pin = (upath, pinned, self.pidfd, inv)
        self.send_now(frame(T_HELLO_OK, inv))

        t, payload, fds, ctr = self.wait_frame(time.monotonic() + START_TIMEOUT)
        self.reader.fds = fds   # closed in finish() unless handed over
        if t != T_START:
            raise Reject(E_PROTOCOL, 'expected START, got type 0x%02x' % t)
        if ctr:
            raise Reject(E_PROTOCOL, 'START control message truncated (MSG_CTRUNC)')
        if len(fds) != 1:
            raise Reject(E_PROTOCOL, 'START must carry exactly one descriptor, got %d' % len(fds))
        runtime, rows, cols, argv = parse_start(payload)
        cwd_fd = fds[0]
        if not stat.S_ISDIR(os.fstat(cwd_fd).st_mode):
            raise Reject(E_PROTOCOL, 'START descriptor is not a directory')
        srv.recheck(pin)
        self.start_unit(argv, runtime, cwd_fd, rows, cols)
        self.reader.close_fds()
        self.relay()

    def start_unit(self, argv, runtime, cwd_fd, rows=0, cols=0):
        srv = self.srv
        unit = 'opencode-pty-%s.service' % secrets.token_hex(16)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.pty = mine
        st = UnitState(unit, self.wake_w)
        self.st = st
        srv.bus.register(st)
        props = srv.unit_props(unit, argv, runtime, theirs.fileno(), cwd_fd, rows, cols)
        try:
            try:
                (job,) = srv.bus.manager('StartTransientUnit', 'ssa(sv)a(sa(sv))', (unit, 'fail', props, []))
            except DBusErrorResponse as e:
                # maybe nothing was created; stop anyway in case it was
                self.unit_started = True
                raise Reject(E_START_FAILED, 'StartTransientUnit failed: %s %s' % (e.name, e.data))
            except TimeoutError:
                self.unit_started = True
                raise Reject(E_START_FAILED, 'StartTransientUnit deadline exceeded')
        finally:
            theirs.close()
        self.unit_started = True
        deadline = time.monotonic() + DBUS_TIMEOUT
        with st.cv:
            while st.job_result is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Reject(E_START_FAILED, 'start job did not finish in time')
                st.cv.wait(left)
            if st.job_result != 'done':
                raise Reject(E_START_FAILED, 'start job result: ' + st.job_result)
        try:
            self.cgroup = srv.bus.get(st.path, SERVICE_IF, 'ControlGroup')
        except DBusErrorResponse:
            self.cgroup = ''   # already ended and collected
        except TimeoutError:
            raise Reject(E_START_FAILED, 'D-Bus deadline exceeded after start')
        log('started', unit, 'for', len(argv), 'argv elements, runtime', runtime)
        self.send_now(frame(T_STARTED, unit.encode()))

    def relay(self):
        srv, st = self.srv, self.st
        pty = self.pty
        pty.setblocking(False)
        to_pty = bytearray()
        to_conn = bytearray()
        # fault exit-without-flush: the sizes of the frames in to_conn, so that
        # what it drops starts at a frame's end
        drop_fault = 'exit-without-flush' in FAULTS
        frames_left = []
        input_eof = False
        pty_wr_closed = False
        pty_eof = False
        stop_sent = False
        exit_sent = False
        over_at = None      # when the unit was seen gone and the slot freed
        last_pty_data = 0.0  # when the PTY last gave bytes
        last_probe = 0.0
        last_sent = 0.0     # when the peer last took a byte (after EXIT was queued: bounded)
        sel = selectors.DefaultSelector()
        self.sel = sel      # closed in finish()
        sel.register(self.wake_r, selectors.EVENT_READ, 'wake')
        reg = {}

        def want(obj, key, ev):
            if reg.get(key) == ev:
                return
            if ev == 0:
                if key in reg:
                    sel.unregister(obj)
                    del reg[key]
                return
            if key in reg:
                sel.modify(obj, ev, key)
            else:
                sel.register(obj, ev, key)
            reg[key] = ev

        def stop_unit():
            nonlocal stop_sent
            if stop_sent:
                return
            stop_sent = True
            st.stop_requested = True
            try:
                srv.bus.manager('StopUnit', 'ss', (st.unit, 'replace'))
            except DBusErrorResponse as e:
                if e.name != 'org.freedesktop.systemd1.NoSuchUnit':
                    log('CLEANUP-ERROR StopUnit', st.unit, e.name)
            except TimeoutError:
                log('CLEANUP-ERROR StopUnit deadline', st.unit)

        while True:
            if self.stop_requested:
                stop_unit()
            with st.cv:
                ended = st.ended
            now = time.monotonic()
            # what the signals say, and the end of the PTY stream, are hints:
            # systemd is asked (also: the unit may have been collected with
            # coalesced signals)
            if not ended and (pty_eof or st.end_hinted()) and now - last_probe > 0.2:
                last_probe = now
                if srv.confirm_end(st):
                    continue
            if ended and drop_fault and not exit_sent:
                log('fault: dropping the output not yet written for', st.unit)
                del to_conn[frames_left[0] if frames_left else 0:]
                frames_left.clear()
                pty_eof = True     # and what the unit's socket still holds: EXIT at once
            if ended and over_at is None:
                # the unit has ended: make sure everything is gone and free the
                # slot; from now on a peer that takes nothing is not waited for
                ok = srv.wait_gone(st, self.cgroup, time.monotonic() + 5.0)
                self.unit_started = not ok
                if ok and self.slot:
                    srv.release_slot()
                    self.slot = False
                over_at = now = time.monotonic()
            # EXIT after every byte of output (CONC-2): at the end of the PTY
            # stream, or, when that end does not come (a process outside the
            # unit holds the stream's other end), once nothing waits to be
            # written and the PTY has given nothing for OUTPUT_IDLE
            quiet = not to_conn and over_at is not None and now - max(over_at, last_pty_data) > OUTPUT_IDLE
            if not exit_sent and over_at is not None and (pty_eof or quiet):
                if not srv.bus.sync():
                    log('signal thread did not drain in time; EXIT may be stale', st.unit)
                code, sig = st.exit_pair()
                log('ended', st.unit, st.summary(), '->', code, sig)
                to_conn += frame(T_EXIT, struct.pack('>ii', code, sig))
                exit_sent = True
            if exit_sent and not to_conn:
                return
            if over_at is not None and to_conn and time.monotonic() - max(last_sent, over_at) > WRITE_TIMEOUT:
                raise PeerGone()   # the session is over and the peer takes nothing: given up
            # interest sets
            ev = 0
            # read the peer after EOF too: a disconnect stops the session (CONC-2)
            if not exit_sent and len(to_pty) < 65536:
                ev |= selectors.EVENT_READ
            if to_conn:
                ev |= selectors.EVENT_WRITE
            want(self.sock, 'conn', ev)
            ev = 0
            if not pty_eof and not exit_sent and (len(to_conn) < 262144 or 'unbounded-output' in FAULTS):
                ev |= selectors.EVENT_READ
            if to_pty and not pty_wr_closed:
                ev |= selectors.EVENT_WRITE
            want(pty, 'pty', ev)
            timeout = 0.2 if (pty_eof or ended) else 1.0
            for key, mask in sel.select(timeout):
                k = key.data
                if k == 'wake':
                    try:
                        os.read(self.wake_r, 4096)
                    except OSError:
                        pass
                elif k == 'conn':
                    if mask & selectors.EVENT_READ:
                        while len(to_pty) < 65536:
                            f = self.reader.poll()   # EOFError: helper gone
                            if f is None:
                                break
                            t, p, fds, ctr = f
                            if fds or ctr:
                                self.reader.fds = fds
                                stop_unit()
                                raise Reject(E_PROTOCOL, 'descriptors on a non-START frame')
                            if t == T_DATA:
                                if input_eof:
                                    stop_unit()
                                    raise Reject(E_PROTOCOL, 'DATA after EOF')
                                if not pty_wr_closed:
                                    to_pty += p
                            elif t == T_EOF:
                                input_eof = True
                            elif t == T_RESIZE:
                                resize_session(self.cgroup, *struct.unpack('>HH', p))
                            elif t == T_STOP:
                                stop_unit()
                            else:
                                stop_unit()
                                raise Reject(E_PROTOCOL, 'unexpected frame type 0x%02x after START' % t)
                    if mask & selectors.EVENT_WRITE and to_conn:
                        try:
                            n = self.sock.send(to_conn)
                            del to_conn[:n]
                            last_sent = time.monotonic()
                            while drop_fault and n and frames_left:
                                k = min(n, frames_left[0])
                                n -= k
                                frames_left[0] -= k
                                if not frames_left[0]:
                                    del frames_left[0]
                        except (BlockingIOError, InterruptedError):
                            pass
                        except OSError:
                            raise PeerGone()
                elif k == 'pty':
                    if mask & selectors.EVENT_READ:
                        try:
                            d = pty.recv(MAX_DATA)
                            if d:
                                last_pty_data = time.monotonic()
                                to_conn += frame(T_DATA_OUT, d)
                                if drop_fault:
                                    frames_left.append(5 + len(d))
                            else:
                                pty_eof = True
                        except (BlockingIOError, InterruptedError):
                            pass
                        except OSError:
                            pty_eof = True
                    if mask & selectors.EVENT_WRITE and to_pty:
                        try:
                            n = pty.send(to_pty)
                            del to_pty[:n]
                        except (BlockingIOError, InterruptedError):
                            pass
                        except OSError:
                            pty_wr_closed = True
                            to_pty.clear()
            if input_eof and not to_pty and not pty_wr_closed:
                try:
                    pty.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                pty_wr_closed = True


def main():
    srv = Server()
    srv.cleanup_orphans()
    srv.listen()

    def on_term(signum, frm):
        if not srv.stopping:
            threading.Thread(target=lambda: (srv.shutdown(), os._exit(0)), daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def watchdog():
        while True:
            time.sleep(1.0)
            if not srv.bus.alive():
                log('system bus connection lost; exiting')
                os._exit(70)

    threading.Thread(target=watchdog, daemon=True).start()
    sd_notify('READY=1\nSTATUS=listening on ' + SOCK_PATH)
    log('listening on', SOCK_PATH, 'capacity', srv.capacity)
    srv.serve()
    while True:
        time.sleep(3600)


if __name__ == '__main__':
    try:
        os.close(3)     # the memfd this script was read from
    except OSError:
        pass
    main()
