"""The fault catalogue: faults a real deployment could have, each applied to a
fresh reference host, and the requirement IDs whose tests must fail.

A fault is applied by a shell script run as root inside the booted host after
deployment and before the suite (`script`), by words for the reference
supervisor's or candidate's fault switches (`supervisor`, `candidate`, see
their sources' headers), or both.
`modules` names the acceptance modules to run (None: the full suite).
"""
from __future__ import annotations

import pathlib
from dataclasses import dataclass

from tests.refhost.common import supervisor_switch_lines

FAULT_DIR = pathlib.Path(__file__).resolve().parent / "faults"

LIBEXEC = "/usr/local/libexec"
SUPERVISOR_UNIT = "/etc/systemd/system/opencode-pty-supervisor.service"
PILOT = "/home/byk/.local/share/opencode-v2-pilot"
CODE = "/home/byk/Code/opencode-v2-pilot"
PLUGIN_FAULTS = "/etc/opencode-reference/plugin-faults"  # the reference smoke harness's switches
BUN = "/usr/local/bin/bun"


@dataclass(frozen=True)
class Fault:
    id: str
    breaks: tuple[str, ...]
    title: str
    script: str = ""
    supervisor: tuple[str, ...] = ()
    candidate: tuple[str, ...] = ()  # words for the reference candidate's fault switches
    script_file: str = ""  # a script in faults/ (rebuilds a patched binary via common.sh)
    modules: tuple[str, ...] | None = ("acceptance/test_ownership.py",)
    expect: tuple[str, ...] = ()  # IDs whose tests must fail; default: breaks
    # run inside after the suite; the fault counts as killed only if it exits 0
    # (what the suite must have left alone, e.g. a unit a lying reply named)
    after: str = ""
    # a root-only file's content the fault points the suite at (VAULT): neither it
    # nor its SHA-256 may appear anywhere in what the run wrote (SUITE-4: root's
    # reads never end up in the terminal, the JUnit or the evidence)
    secret: str = ""
    # what a marker-removed fault planted at the marker path: a marker left at the
    # end must not be it (a fresh marker of a READY run replaced it: allowed)
    planted_marker: str = ""
    # "tests": caught when a test carrying a must_fail ID fails. "marker-removed":
    # a planted marker is caught when the gate reports removing it (MARK-4).
    # "start-refused": caught when the run is refused at start-up, exit 4, no
    # report, by a NOT READY line naming a must_fail ID (and `says`): what stands
    # at the marker path and is not the suite's to delete (MARK-4).
    # "withstood": an attack the suite must shrug off: caught when the run ends
    # within deadline_s with a report, fails nothing the control does not, gives
    # the control's verdict, and the `after` check passes (the attack achieved nothing).
    kill: str = "tests"
    # text the report's first blocker must hold: the one cause an operator reads first
    first_cause: str = ""
    # text the failure of a test carrying a must_fail ID must hold: what that test saw
    says: str = ""
    deadline_s: float | None = None  # the suite is stopped after this long (None: no bound)
    # (release, why): a release whose systemd refuses the fault (tests/refhost/tree.py
    # RELEASES). There the fault's script must fail (it checks that the fault took
    # hold): the run proves the refusal, a catalogue fact, never a kill.
    refused_on: tuple[tuple[str, str], ...] = ()

    @property
    def must_fail(self) -> tuple[str, ...]:
        return self.expect or self.breaks

    def refusal(self, release: str) -> str | None:
        """Why `release` refuses this fault (None: it applies there)."""
        return dict(self.refused_on).get(release)


# Restart the supervisor and wait (bounded) until it listens again.
RESTART_SUPERVISOR = ("systemctl restart opencode-pty-supervisor.service && "
                      "i=0; while [ ! -S /run/opencode-pty/supervisor.sock ] && [ $i -lt 200 ]; do "
                      "i=$((i+1)); sleep 0.05; done; [ -S /run/opencode-pty/supervisor.sock ]")


# the watcher of faults/user-kills-extra-child.sh killed an extra child (the attack happened)
WATCHER_KILLED = ("systemctl stop pty-fault-watcher.service || true; cat /var/lib/pty-fault/watcher.log; "
                  "grep -q '^KILLED' /var/lib/pty-fault/watcher.log")

# the watcher of faults/user-forges-iso2-report.sh wrote a report into a probe's terminal
FORGER_REPLACED = ("systemctl stop pty-fault-watcher.service || true; cat /var/lib/pty-fault/watcher.log; "
                   "grep -q '^REPLACED' /var/lib/pty-fault/watcher.log")
# the watcher of faults/user-swaps-runtime-bin.sh exchanged bin/, and the wrapper's preload ran
WATCHER_EXCHANGED = ("systemctl stop pty-fault-watcher.service || true; cat /var/lib/pty-fault/watcher.log "
                     "/var/lib/pty-fault/preloaded; grep -q '^EXCHANGED' /var/lib/pty-fault/watcher.log && "
                     "grep -q '^PRELOADED' /var/lib/pty-fault/preloaded")
# the watcher of faults/user-forges-iso2-connect.sh (or -launcher-exit.sh) tried to attach to a
# probe or the launcher (TRIED: refused) or changed what it did (FORGED)
WATCHER_FORGED = ("systemctl stop pty-fault-watcher.service || true; cat /var/lib/pty-fault/watcher.log; "
                  "grep -q '^FORGED\\|^TRIED' /var/lib/pty-fault/watcher.log")
# the watcher of faults/user-forges-unit5-unshare.sh held a process through its exec into a
# session probe's interpreter (the attack happened)
WATCHER_HELD = ("systemctl stop pty-fault-watcher.service || true; cat /var/lib/pty-fault/watcher.log; "
                "grep -q '^HELD' /var/lib/pty-fault/watcher.log")
# a password the service user gives the candidate through a continued server.env line
CONTINUED_SECRET = "Zq7-wV3k-continued-password-tail"
SHORT_SECRET = "Qz!"  # a password of three characters (a blind red team's round nine)
ROTATED_SECRET = "rotated-password-5e0c91d2"  # written into server.env mid-run

# git as the service user, in the candidate checkout's terms (a HOME of its own: root's is unreadable)
AS_BYK = "runuser -u byk -- env HOME=/home/byk"
BYK_GIT = f"{AS_BYK} git -c user.name=x -c user.email=x@x"
HEAD_NOW = f"$({BYK_GIT} -C {CODE} rev-parse HEAD)"

# an earlier run's marker in MARK-2's shape (what the start removes: MARK-4)
STALE_MARKER = f"revision=opencode-v2-pilot:git:{'0' * 40};pty-source:sha256:{'0' * 64}"
STALE_RECORDS = " ".join(f"'{'0' * 64}  {LIBEXEC}/opencode-pty-{r}'" for r in ("supervisor", "launcher", "client"))
MARKER = "/etc/opencode/pty-supervisor-verified"
VAULT = "/root/pty-acc-vault/secret"


def vault(secret: str) -> str:
    """Shell: a root-only file holding `secret` (no newline) at VAULT."""
    return (f"mkdir -p -m 0700 {VAULT.rsplit('/', 1)[0]} && "
            f"printf '%s' '{secret}' > {VAULT} && chmod 0600 {VAULT}")


# 40 hex digits: what a ref file holds, so a followed link would even read as a revision
GIT_SECRET = "5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7"
TREE_SECRET = "pty-acceptance-vault-secret-9c1d0b"
HARDLINK_SECRET = "pty-acceptance-hardlink-secret-3a7e52"
# fs.protected_hardlinks=0 lets the service user link a root-only file into its
# tree. The sysctl is the host kernel's, not the machine's: systemd-nspawn
# mounts /proc/sys read-only (`/proc/sys ro` in the machine's mountinfo,
# checked), and setting it would change the shared host. So root makes the
# link the user could make with it at 0: what matters is what the suite reads.
REFERENCE_PASSWORD = "reference-host-not-a-secret"  # deploy.sh's server.env: never in what the run writes


def appended_to_execstart(words: str) -> str:
    """Shell, for a script the service user runs (inside sh -c '...'): `words` appended to
    the ExecStart= line of its own candidate unit file."""
    return f"sed -i \"s|^\\(ExecStart=.*\\)\\$|\\1 {words}|\" {PILOT}/opencode-v2.service"


NOTE_IN_UNIT = appended_to_execstart(f"--note {REFERENCE_PASSWORD}")  # the password as a note in ExecStart=
ENV_SECRET = "PTY_ACC_ROOT_ONLY=pty-acceptance-env-vault-4be1d7"  # an EnvironmentFile= line
RUNTIME = f"{CODE}/packages/cli/dist-v2-pilot-final/cli-node-linux-x64/bin/opencode2-node"
# the runtime swap happened and was undone: the runtime is the deployed one again
RUNTIME_RESTORED = ("grep -x swapped /home/byk/.runtime-swapper-state && "
                    "grep -x restored /home/byk/.runtime-swapper-state && "
                    f"[ \"$(sha256sum < {RUNTIME} | cut -c1-64)\" = "
                    "\"$(sed -n 's/^runtime_sha256=//p' /etc/opencode-reference/deploy.env)\" ]")


def _m(*names: str) -> tuple[str, ...]:
    return tuple(f"acceptance/test_{n}.py" for n in names)


FULL = None  # run the whole suite: the gate itself must withhold the marker

VICTIM_SESSION = "opencode-pty-0badc0de0badc0de0badc0de0badc0de.service"

# An administrator's drop-in for every opencode-pty-* unit: the session units, and
# by systemd's prefix rule the supervisor's unit too (not restarted: it runs on as
# it was; only test_hardening, not run with these, would read its new properties).
SESSION_DROP_INS = "/etc/systemd/system/opencode-pty-.service.d"


def _session_drop_in(name: str, *lines: str) -> str:
    body = "\\n".join(lines)
    return (f"mkdir -p {SESSION_DROP_INS} && printf '[Service]\\n{body}\\n' > {SESSION_DROP_INS}/{name}.conf"
            " && systemctl daemon-reload")


# The reference host has no Docker: a listener at /run/docker.sock, root's, mode 0660
# like dockerd's, accepting and closing every connection.
FAKE_DOCKER = ("systemd-run --unit=fake-docker.service /usr/bin/python3 -c \"import os, socket; "
               "s = socket.socket(socket.AF_UNIX); s.bind('/run/docker.sock'); "
               "os.chmod('/run/docker.sock', 0o660); s.listen(16)\nwhile True: s.accept()[0].close()\" && "
               "i=0; while [ ! -S /run/docker.sock ] && [ $i -lt 200 ]; do i=$((i+1)); sleep 0.05; done; "
               "[ -S /run/docker.sock ]")


def _victim(unit: str, props: str = "") -> str:
    """A running unit a lying supervisor names in STARTED; its InvocationID and
    MainPID are kept to check afterwards that the suite left it alone."""
    return (f"systemd-run --unit={unit} {props} /bin/sleep 3600 && "
            f"systemctl show -p InvocationID -p MainPID {unit} > /root/victim.before && "
            f"mkdir -p /etc/opencode-reference && echo {unit} > /etc/opencode-reference/started-name")


def _victim_untouched(unit: str) -> str:
    return (f"systemctl show -p InvocationID -p MainPID {unit} > /root/victim.after; "
            f"systemctl show -p ActiveState -p InvocationID -p MainPID {unit}; "
            f"cmp /root/victim.before /root/victim.after && "
            f"[ \"$(systemctl show -p ActiveState --value {unit})\" = active ]")

FAULTS: list[Fault] = [
    # -- OWN-1: the binaries and their directories
    Fault("client-group-writable", ("OWN-1",), "the client binary is group-writable",
          f"chmod g+w {LIBEXEC}/opencode-pty-client", modules=FULL),
    Fault("supervisor-owned-by-service-user", ("OWN-1",), "the supervisor binary belongs to byk",
          f"chown byk:byk {LIBEXEC}/opencode-pty-supervisor"),
    Fault("launcher-group-not-root", ("OWN-1",), "the launcher's group is byk",
          f"chgrp byk {LIBEXEC}/opencode-pty-launcher"),
    Fault("libexec-group-writable", ("OWN-1",), "/usr/local/libexec is group-writable",
          f"chmod g+w {LIBEXEC}", modules=FULL),
    Fault("local-owned-by-service-user", ("OWN-1",), "/usr/local belongs to byk",
          "chown byk /usr/local"),
    Fault("launcher-is-a-symlink", ("OWN-1",), "the launcher is a symlink to a root-owned copy",
          f"cp -p {LIBEXEC}/opencode-pty-launcher /usr/lib/launcher-copy && "
          f"ln -sf /usr/lib/launcher-copy {LIBEXEC}/opencode-pty-launcher",
          modules=_m("ownership", "builds"), expect=("OWN-1", "SCOPE-2")),
    # -- SCOPE-2 / BUILD-3: a binary swapped after the build
    Fault("launcher-swapped", ("SCOPE-2", "BUILD-3"), "the launcher was replaced after the build",
          f"printf 'x' >> {LIBEXEC}/opencode-pty-launcher", modules=FULL),
    Fault("client-replaced-by-other-build", ("SCOPE-2", "BUILD-3"),
          "the installed client is the launcher's build",
          f"cp {LIBEXEC}/opencode-pty-launcher {LIBEXEC}/opencode-pty-client",
          modules=_m("ownership", "builds")),
    # -- OWN-2: what feeds the running supervisor
    Fault("unit-file-group-writable", ("OWN-2",), "the supervisor's unit file is group-writable",
          f"chmod g+w {SUPERVISOR_UNIT}", modules=FULL),
    Fault("drop-in-owned-by-service-user", ("OWN-2",), "a drop-in of the supervisor belongs to byk",
          f"mkdir -p {SUPERVISOR_UNIT}.d && printf '[Service]\\nEnvironment=X=1\\n' > {SUPERVISOR_UNIT}.d/x.conf"
          f" && chown byk {SUPERVISOR_UNIT}.d/x.conf && systemctl daemon-reload"),
    Fault("exec-start-pre-writable", ("OWN-2",), "an ExecStartPre program is writable by byk",
          "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/pty-pre && chmod 0775 /usr/local/bin/pty-pre"
          " && chgrp byk /usr/local/bin/pty-pre"
          f" && mkdir -p {SUPERVISOR_UNIT}.d && printf '[Service]\\nExecStartPre=/usr/local/bin/pty-pre\\n'"
          f" > {SUPERVISOR_UNIT}.d/pre.conf && systemctl daemon-reload"),
    Fault("slice-file-other-writable", ("OWN-2",), "the slice's unit file is writable by anyone",
          "chmod o+w /etc/systemd/system/opencode-pty.slice"),
    Fault("supervisor-environment-file-of-the-service-user", ("OWN-2",),
          "a root-owned drop-in gives the supervisor an EnvironmentFile= that byk owns",
          "printf 'OPENCODE_PTY_NOTE=1\\n' > /etc/opencode-pty-supervisor.env"
          " && chown byk /etc/opencode-pty-supervisor.env"
          f" && mkdir -p {SUPERVISOR_UNIT}.d"
          f" && printf '[Service]\\nEnvironmentFile=/etc/opencode-pty-supervisor.env\\n'"
          f" > {SUPERVISOR_UNIT}.d/env.conf && systemctl daemon-reload && {RESTART_SUPERVISOR}"),
    Fault("supervisor-working-directory-of-the-service-user", ("OWN-2",),
          "a root-owned drop-in runs the supervisor in a directory byk owns",
          "mkdir -p /var/lib/opencode-pty-wd && chown byk:byk /var/lib/opencode-pty-wd"
          f" && mkdir -p {SUPERVISOR_UNIT}.d && printf '[Service]\\nWorkingDirectory=/var/lib/opencode-pty-wd\\n'"
          f" > {SUPERVISOR_UNIT}.d/wd.conf && systemctl daemon-reload && {RESTART_SUPERVISOR}"),
    # -- SCOPE-2 / CUT-4: the running supervisor is the installed, reviewed file
    Fault("supervisor-runs-a-root-owned-copy", ("SCOPE-2", "CUT-4"),
          "a root-owned drop-in's ExecStart= runs a byte-identical root-owned copy of the supervisor "
          "(every hash, OWN-1/OWN-2 and BUILD-3 still pass)",
          f"cp -p {LIBEXEC}/opencode-pty-supervisor {LIBEXEC}/opencode-pty-supervisor.copy"
          f" && mkdir -p {SUPERVISOR_UNIT}.d"
          f" && printf '[Service]\\nExecStart=\\nExecStart={LIBEXEC}/opencode-pty-supervisor.copy\\n'"
          f" > {SUPERVISOR_UNIT}.d/copy.conf && systemctl daemon-reload && {RESTART_SUPERVISOR}",
          modules=_m("ownership", "hardening")),
    # -- SCOPE-1 / SCOPE-3 / BUILD-1: the source and the build
    Fault("source-file-changed", ("SCOPE-1",), "a Go source file differs from the reviewed tree",
          f"printf '// changed\\n' >> {PILOT}/supervisor/cmd/launcher/main.go", modules=_m("builds")),
    Fault("plugin-file-changed", ("SCOPE-1",), "a plugin source differs from the reviewed tree",
          f"printf '// changed\\n' >> {CODE}/packages/plugin/src/index.ts", modules=_m("builds")),
    Fault("new-revision", ("SCOPE-3",), "the candidate checkout moved to another commit",
          f"runuser -u byk -- git -C {CODE} -c user.name=x -c user.email=x@x commit -q --allow-empty -m moved",
          modules=_m("builds")),
    # SCOPE-3 refuses every indirection git reads and the suite does not (provenance/gitrev.py):
    # one fault each, since each is refused by a check of its own (a shared fault stays
    # killed while any one of them works). commondir, the gitdir: file and a .git its owner
    # cannot read make git give another commit; alternates, grafts and replace refs leave
    # `rev-parse HEAD` alone and change what git shows under it.
    Fault("git-commondir-other-commit", ("SCOPE-3",),
          "the user points .git/commondir at a copy of the repository holding another commit: "
          "`git rev-parse HEAD` gives that commit, .git/refs still says the claimed one",
          f"old={HEAD_NOW} && runuser -u byk -- cp -a {CODE}/.git /home/byk/shadow.git"
          f" && {BYK_GIT} --git-dir=/home/byk/shadow.git --work-tree={CODE} commit -q --allow-empty -m moved"
          f" && printf '/home/byk/shadow.git\\n' | {AS_BYK} tee {CODE}/.git/commondir >/dev/null"
          f" && [ \"{HEAD_NOW}\" != \"$old\" ] && [ \"$(cat {CODE}/.git/refs/heads/main)\" = \"$old\" ]",
          modules=_m("builds"), says="commondir exists"),
    Fault("git-gitdir-file-other-commit", ("SCOPE-3",),
          "the user moves .git away, leaves a `gitdir:` file naming it, and commits there",
          f"old={HEAD_NOW} && {AS_BYK} mv {CODE}/.git /home/byk/elsewhere.git"
          f" && printf 'gitdir: /home/byk/elsewhere.git\\n' | {AS_BYK} tee {CODE}/.git >/dev/null"
          f" && {BYK_GIT} -C {CODE} commit -q --allow-empty -m moved && [ \"{HEAD_NOW}\" != \"$old\" ]",
          modules=_m("builds"), says="is a file, not a directory"),
    Fault("git-objects-unreadable-bare-checkout", ("SCOPE-3",),
          "the user makes the checkout itself a bare repository holding another commit and "
          ".git/objects mode 0: git, run as the user, takes the checkout for the repository "
          "(root reads .git whatever its modes)",
          f"old={HEAD_NOW} && {BYK_GIT} init -q --bare -b main {CODE}"
          f" && c=$({BYK_GIT} --git-dir={CODE} commit-tree -m moved $({BYK_GIT} --git-dir={CODE} mktree </dev/null))"
          f" && {BYK_GIT} --git-dir={CODE} update-ref refs/heads/main \"$c\" && {AS_BYK} chmod 0 {CODE}/.git/objects"
          f" && [ \"{HEAD_NOW}\" = \"$c\" ] && [ \"$(cat {CODE}/.git/refs/heads/main)\" = \"$old\" ]",
          modules=_m("builds"), says="objects has mode 0000"),
    Fault("git-replace-ref", ("SCOPE-3",),
          "a replace ref puts an empty tree's commit in HEAD's place: `rev-parse HEAD` is the claim, "
          "`git ls-tree HEAD` lists nothing",
          f"t=$({BYK_GIT} -C {CODE} mktree </dev/null) && c=$({BYK_GIT} -C {CODE} commit-tree -m other \"$t\")"
          f" && {BYK_GIT} -C {CODE} replace HEAD \"$c\" && [ -z \"$({BYK_GIT} -C {CODE} ls-tree HEAD)\" ]",
          modules=_m("builds"), says="holds replace refs"),
    Fault("git-alternates", ("SCOPE-3",), "objects/info/alternates names another repository's objects",
          f"{BYK_GIT} clone -q --bare {CODE} /home/byk/other.git"
          f" && printf '/home/byk/other.git/objects\\n' | {AS_BYK} tee {CODE}/.git/objects/info/alternates >/dev/null"
          f" && {BYK_GIT} -C {CODE} count-objects -v | grep -qx 'alternate: /home/byk/other.git/objects'",
          modules=_m("builds"), says="objects/info/alternates exists"),
    Fault("git-grafts", ("SCOPE-3",), "info/grafts gives HEAD a parent it does not have",
          f"h={HEAD_NOW} && p=$({BYK_GIT} -C {CODE} commit-tree -m parent $({BYK_GIT} -C {CODE} mktree </dev/null))"
          f" && printf '%s %s\\n' \"$h\" \"$p\" | {AS_BYK} tee {CODE}/.git/info/grafts >/dev/null"
          f" && [ \"$({BYK_GIT} -C {CODE} rev-list --count HEAD)\" = 2 ]",
          modules=_m("builds"), says="info/grafts exists"),
    Fault("non-reproducible-build", ("BUILD-1",), "the toolchain embeds a timestamp in every build",
          "mv /usr/bin/go /usr/bin/go.real && "
          "printf '#!/bin/sh\\n/usr/bin/go.real \"$@\" || exit $?\\nwhile [ $# -gt 0 ]; do "
          "[ \"$1\" = -o ] && date +%%s%%N >> \"$2\"; shift; done\\n' > /usr/bin/go && chmod 0755 /usr/bin/go",
          modules=_m("builds"), expect=("BUILD-1",)),
    # -- CUT-4: unit definitions
    Fault("supervisor-new-privileges", ("CUT-4",), "a drop-in lets the supervisor gain privileges",
          f"mkdir -p {SUPERVISOR_UNIT}.d && printf '[Service]\\nNoNewPrivileges=no\\n' > {SUPERVISOR_UNIT}.d/nnp.conf"
          " && systemctl daemon-reload", modules=_m("hardening")),
    # a blind red team's round eight (issue 37): the candidate's verify forged by the service user
    # (it once ended READY with the marker); the drop-in alone is its control
    Fault("candidate-reload-missing", ("CUT-4",), "a drop-in gives the candidate's unit an ExecReload= that "
          "is no executable", "mkdir -p /etc/systemd/system/opencode-v2.service.d && printf "
          "'[Service]\\nExecReload=/usr/local/bin/opencode-reload-missing\\n' > "
          "/etc/systemd/system/opencode-v2.service.d/reload.conf && systemctl daemon-reload",
          modules=_m("hardening"), says="systemd-analyze verify"),
    Fault("candidate-reload-missing-verify-forged", ("CUT-4",), "a drop-in gives the candidate's unit an "
          "ExecReload= that is no executable, and a watcher of the service user's attaches to every "
          "systemd-analyze verify the suite runs and makes it exit 0", script_file="user-forges-analyze-verify.sh",
          modules=_m("hardening"), says="systemd-analyze verify", after=WATCHER_FORGED),
    # systemd 257's PrivateTmp=disconnected: `systemctl show` still says PrivateTmp=yes
    # (the pin), only PrivateTmpEx tells; systemd 252 cannot parse the value
    Fault("supervisor-private-tmp-disconnected", ("CUT-4",),
          "a drop-in gives the supervisor PrivateTmp=disconnected, not the pinned PrivateTmp=yes",
          f"mkdir -p {SUPERVISOR_UNIT}.d && printf '[Service]\\nPrivateTmp=disconnected\\n' > "
          f"{SUPERVISOR_UNIT}.d/tmp.conf && systemctl daemon-reload && {RESTART_SUPERVISOR} && "
          "[ \"$(systemctl show -p PrivateTmpEx --value opencode-pty-supervisor.service)\" = disconnected ]",
          modules=_m("hardening"), says="PrivateTmpEx=disconnected",
          refused_on=(("bookworm", "systemd 252 has no PrivateTmp=disconnected: it ignores the line "
                                   "(Failed to parse, PrivateTmp stays yes) and shows no PrivateTmpEx"),)),
    Fault("candidate-unit-broken", ("CUT-4", "SCOPE-1"), "the candidate unit names a missing program",
          f"sed -i 's|^ExecStart=.*|ExecStart=/nonexistent/opencode2-node|' {PILOT}/opencode-v2.service",
          modules=_m("hardening", "builds")),
    # -- ORPHAN-1 (static part): a session-like unit the supervisor cannot clean
    Fault("lookalike-session-unit", ("ORPHAN-1",), "a loaded opencode-pty-* unit that is not strict-name",
          "systemd-run --unit=opencode-pty-lookalike -p BindsTo=opencode-pty-supervisor.service sleep 600",
          modules=_m("orphans")),
    Fault("session-unit-bound-elsewhere", ("ORPHAN-1",), "a strict-name session unit bound to another unit",
          "systemd-run --unit=opencode-pty-0123456789abcdef0123456789abcdef -p BindsTo=dbus.service sleep 600",
          modules=_m("orphans")),
    # -- MARK: the marker and its directory
    Fault("marker-dir-group-writable", ("MARK-1",), "/etc/opencode is group-writable",
          "mkdir -p /etc/opencode && chmod 0775 /etc/opencode", modules=_m("marker")),
    # (MARK-4 as well: the run cannot look at the marker path through the link)
    Fault("marker-dir-symlink", ("MARK-1", "MARK-4"), "/etc/opencode is a symlink to a byk-owned directory",
          "rm -rf /etc/opencode && mkdir -p /home/byk/opencode-etc && chown byk /home/byk/opencode-etc"
          " && ln -s /home/byk/opencode-etc /etc/opencode", modules=_m("marker"), expect=("MARK-1",)),
    # The full suite on an otherwise good host: the stale marker must go, and a
    # marker at the end must be the run's own (a fresh one is right, not a fault).
    Fault("stale-marker", ("MARK-4",), "a well-formed marker from an earlier run is already in place",
          f"mkdir -p /etc/opencode && printf '%s\\n' '{STALE_MARKER}' {STALE_RECORDS} > {MARKER}",
          modules=FULL, kill="marker-removed", planted_marker=STALE_MARKER),
    # Only a root-owned file that parses as a marker is removed (issue 38): a link
    # or a file of another kind at the marker path is named, left, and the run refused.
    Fault("symlinked-marker", ("MARK-4",), "the marker path is a symlink planted by the service user",
          f"mkdir -p /etc/opencode && ln -s /home/byk/fake-marker {MARKER}",
          modules=_m("marker"), kill="start-refused", says=f"{MARKER} is a symlink",
          after=f"[ -L {MARKER} ]"),
    Fault("foreign-file-at-marker", ("MARK-4",), "a root-owned file that is no marker stands at the marker path",
          f"mkdir -p /etc/opencode && printf 'keep me\\n' > {MARKER}",
          modules=_m("marker"), kill="start-refused", says=f"{MARKER} does not parse as a marker",
          after=f"grep -qx 'keep me' {MARKER}"),
]

FAULTS += [
    # -- PEER: who may talk to the supervisor (reference-supervisor fault switches)
    Fault("skip-pin-recheck", ("PEER-4",), "the pin is not re-checked before StartTransientUnit",
          supervisor=("skip-pin-recheck",), modules=FULL),
    Fault("skip-cgroup-check", ("PEER-2",), "the peer's ControlGroup is not pinned",
          supervisor=("skip-cgroup-check",), modules=_m("peer")),
    # -- FLOOD
    Fault("no-unauth-limit", ("FLOOD-1",), "unauthenticated connections have no quota of their own",
          supervisor=("no-unauth-limit",), modules=_m("flood")),
    Fault("unbounded-output", ("FLOOD-4",), "output before a reader attaches is buffered without bound",
          supervisor=("unbounded-output",), modules=_m("flood")),
    # -- PROTO
    Fault("limits-off-by-one", ("PROTO-1",), "every limit admits one more than allowed",
          supervisor=("limits-off-by-one",), modules=_m("protocol")),
    Fault("accepts-nul-and-bad-utf8", ("PROTO-3",), "the supervisor accepts NUL and malformed UTF-8",
          script_file="sup-accept-nul.sh", modules=_m("protocol")),
    Fault("keeps-received-fds", ("PROTO-3",), "the supervisor never closes descriptors of rejected STARTs",
          script_file="sup-leak-fds.sh", modules=_m("protocol")),
    Fault("swaps-received-fds", ("PROTO-3",), "the supervisor keeps the descriptors of rejected "
          "STARTs and closes as many of its own: the count stays, the descriptors differ",
          script_file="sup-swap-fds.sh", modules=_m("protocol")),
    Fault("accepts-two-fds", ("PROTO-3",), "the supervisor accepts a START with two descriptors",
          script_file="sup-two-fds.sh", modules=FULL),
    Fault("no-header-bound", ("PROTO-3",), "frame lengths are not checked at the header",
          script_file="sup-no-bound.sh", modules=_m("protocol")),
    Fault("supervisor-stopped", ("SCOPE-2",), "the supervisor is not running: the preflight says so "
          "once, first and last, and no test runs", "systemctl stop opencode-pty-supervisor.service",
          modules=FULL, first_cause="preflight: unit opencode-pty-supervisor.service: the supervisor is "
                                    "inactive/dead, not active"),
    Fault("supervisor-other-framing", ("PROTO-3",), "the supervisor answers in another framing (type "
          "first, little-endian length): one wire-format cause first, the session tests not run",
          supervisor=("other-framing",), modules=FULL,
          first_cause="wire format: the supervisor at /run/opencode-pty/supervisor.sock does not speak "
                      "the suite's wire format (TARGET-CONTRACT section 4)"),
    Fault("lenient-launcher", ("PROTO-4",), "the launcher accepts padded, non-canonical base64",
          script_file="launcher-lenient.sh", modules=_m("protocol")),
    # issue 37, the audit of what the suite believes: the launcher's direct runs attached to
    Fault("lenient-launcher-exit-forged", ("PROTO-4",), "the launcher accepts padded, non-canonical base64, "
          "and a watcher of the service user's attaches to every direct run of it and makes it exit 1",
          script_file="user-forges-launcher-exit.sh", modules=_m("protocol"), after=WATCHER_FORGED),
    Fault("launcher-drops-script-f", ("PROTO-4",), "the launcher runs script(1) without -f",
          script_file="launcher-no-f.sh", modules=_m("protocol")),
    Fault("client-16k-frames", ("PROTO-2",), "the client splits writes into 16 KiB frames",
          script_file="client-16k.sh", modules=_m("protocol")),
    # -- HELPER: the fixed helper
    Fault("client-opens-a-file", ("HELPER-1", "HELPER-2", "HELPER-4", "HELPER-5"),
          "the client is a wrapper that opens /etc/hostname", script_file="client-wrapper.sh",
          modules=_m("helper")),
    Fault("client-connects", ("HELPER-1",), "the client connects to the supervisor socket itself",
          script_file="client-connects.sh", modules=_m("helper"), expect=("HELPER-1",)),
    Fault("client-sends-two-fds", ("HELPER-3",), "the client's START carries two descriptors",
          script_file="client-two-fds.sh", modules=_m("helper"), expect=("HELPER-3",)),
    Fault("launcher-keeps-fd3", ("HELPER-4",), "the launcher leaves its own executable open on fd 3 "
          "for the command", script_file="launcher-keeps-fd3.sh", modules=_m("helper")),
]

FAULTS += [
    # -- UNIT: what a session unit is allowed to be
    Fault("session-keeps-capabilities", ("UNIT-3",), "session units keep the default bounding set",
          supervisor=("omit-prop:CapabilityBoundingSet",), modules=FULL),
    Fault("session-not-bound", ("UNIT-8",), "session units are not bound to the supervisor",
          supervisor=("omit-prop:BindsTo",), modules=_m("session_units")),
    Fault("session-may-unshare", ("UNIT-5",), "session units may create namespaces",
          supervisor=("omit-prop:RestrictNamespaces",), modules=_m("session_units")),
    Fault("session-sees-proc", ("UNIT-5",), "session units see every process in /proc",
          supervisor=("omit-prop:ProtectProc",), modules=_m("session_units")),
    # issue 37, the audit of what the suite believes: UNIT-5's probe held by a tracer of the
    # user's from before its exec (its answer would be the tracer's): refused as traced
    Fault("session-may-unshare-forged-before-exec", ("UNIT-5",), "session units may create namespaces, and a "
          "watcher of the service user's attaches to each session's launcher before it exec's the command, "
          "follows it through the exec into the probe and makes unshare() return EPERM",
          supervisor=("omit-prop:RestrictNamespaces",), script_file="user-forges-unit5-unshare.sh",
          modules=_m("session_units"), after=WATCHER_HELD,
          # the module's one probe session fails its first test (UNIT-1) with the channel's refusal;
          # the stop guard then ends the run (SUITE-5: the tracer held a session process stopped)
          expect=("UNIT-1",), says="is not the probe the suite started: it is traced by pid"),
    Fault("session-any-syscall", ("UNIT-5",), "session units have no system call filter",
          supervisor=("omit-prop:SystemCallFilter",), modules=_m("session_units")),
    Fault("session-has-devices", ("UNIT-4",), "session units see the host's devices",
          supervisor=("omit-prop:PrivateDevices",), modules=_m("session_units")),
    Fault("session-device-allow-drop-in", ("UNIT-4",), "an administrator's drop-in for every "
          "opencode-pty-* unit adds DeviceAllow=block-sd rw (the private /dev still hides the disks)",
          "mkdir -p /etc/systemd/system/opencode-pty-.service.d && printf '[Service]\\nDeviceAllow=block-sd rw\\n'"
          " > /etc/systemd/system/opencode-pty-.service.d/devices.conf && systemctl daemon-reload",
          modules=_m("session_units")),
    Fault("session-runs-as-root", ("UNIT-2",), "session units have no User= (run as root)",
          supervisor=("omit-prop:User",), modules=_m("session_units"), expect=("UNIT-2",)),
    Fault("service-user-in-a-group", ("UNIT-2",), "the service user belongs to another group",
          "usermod -aG users byk", modules=_m("session_units")),
    Fault("session-reaches-host-sockets", ("UNIT-7",), "session units lack InaccessiblePaths=",
          supervisor=("no-inaccessible-paths",), modules=_m("session_units")),
    # UNIT-7 through another path: each host socket bound elsewhere inside every session
    Fault("session-binds-system-bus", ("UNIT-7",), "an administrator's drop-in for every opencode-pty-* "
          "unit binds the system bus socket at /var/tmp/bus.sock inside each session",
          _session_drop_in("bus", "BindPaths=-/run/dbus/system_bus_socket:/var/tmp/bus.sock"),
          modules=_m("session_units")),
    Fault("service-user-process-outside-sessions", ("UNIT-7",), "a dumpable process of the service user runs "
          "outside the sessions (as a login shell or a production server of that user would): every session "
          "reaches the host's sockets through its /proc/<pid>/root",
          "systemd-run --unit=pty-fault-byk-shell --uid=byk --gid=byk -p WorkingDirectory=/ /bin/sleep infinity",
          modules=_m("session_units"), says="through /proc/<pid>/root of processes of the service user outside "
          "the session"),
    Fault("session-binds-supervisor-socket-dir", ("UNIT-7",), "an administrator's drop-in for every "
          "opencode-pty-* unit binds the supervisor's socket directory, read-only, at /var/tmp/opencode-pty",
          _session_drop_in("sup", "BindReadOnlyPaths=-/run/opencode-pty:/var/tmp/opencode-pty"),
          modules=_m("session_units")),
    Fault("session-binds-docker-socket", ("UNIT-7",), "Docker listens at /run/docker.sock, and an "
          "administrator's drop-in for every opencode-pty-* unit binds it at /var/tmp/docker.sock",
          FAKE_DOCKER + " && " + _session_drop_in("docker", "BindPaths=-/run/docker.sock:/var/tmp/docker.sock"),
          modules=_m("session_units")),
    # every hardening property of the contract, on the live session unit
    Fault("session-private-tmp-off", ("UNIT-7",), "an administrator's drop-in for every opencode-pty-* "
          "unit sets PrivateTmp=no", _session_drop_in("tmp", "PrivateTmp=no"), modules=_m("session_units")),
    Fault("session-protect-system-off", ("UNIT-7",), "an administrator's drop-in for every opencode-pty-* "
          "unit sets ProtectSystem=no", _session_drop_in("system", "ProtectSystem=no"),
          modules=_m("session_units")),
    Fault("session-personality-unlocked", ("UNIT-5",), "an administrator's drop-in for every opencode-pty-* "
          "unit sets LockPersonality=no", _session_drop_in("personality", "LockPersonality=no"),
          modules=_m("session_units")),
    # -- PTY
    Fault("exit-always-zero", ("PTY-4",), "EXIT always reports a clean exit",
          supervisor=("exit-status-zero",), modules=_m("pty"), expect=("PTY-3", "PTY-4")),
    Fault("launcher-joins-argv", ("PTY-1", "PTY-2"), "the launcher joins argv into one shell string",
          script_file="launcher-joins-argv.sh", modules=_m("pty")),
    Fault("launcher-without-pty", ("PTY-1", "PTY-3"), "the launcher runs the command without script(1)",
          script_file="launcher-without-pty.sh", modules=_m("pty")),
]

FAULTS += [
    # -- CONC / CGROUP / ORPHAN: every ending, nothing survives
    Fault("capacity17", ("CONC-1",), "a seventeenth session is admitted",
          supervisor=("capacity17",), modules=_m("concurrency")),
    Fault("no-stop-on-disconnect", ("CONC-2", "CGROUP-1"), "a closed connection leaves its unit running",
          supervisor=("no-stop-on-disconnect",), modules=_m("concurrency", "cgroups"),
          expect=("CONC-1", "CONC-2", "CGROUP-1")),
    Fault("session-killmode-process", ("CGROUP-1",), "session units use KillMode=process",
          supervisor=("session-killmode-process",), modules=_m("cgroups", "concurrency"),
          expect=("CGROUP-1", "CONC-2")),
    # a blind red team's round eight (issue 37): the escaped descendants reaped by the user before
    # CGROUP-1 looks at the cgroup; the unit's KillMode still tells (test_session_units)
    Fault("session-killmode-process-reaped", ("CGROUP-1",), "session units use KillMode=process, and a "
          "watcher of the service user's kills a session's leftover processes the moment its main process is "
          "gone", supervisor=("session-killmode-process",), script_file="user-reaps-escaped-processes.sh",
          modules=_m("cgroups", "session_units"), says="KillMode",
          after=("systemctl stop pty-fault-watcher.service || true; cat /var/lib/pty-fault/watcher.log; "
                 "grep -q '^REAPED' /var/lib/pty-fault/watcher.log")),
    Fault("no-orphan-cleanup", ("ORPHAN-1",), "the supervisor leaves old session units at start",
          supervisor=("no-orphan-cleanup",), modules=_m("orphans")),
    Fault("forged-signals-end-sessions", ("CONC-2",), "the supervisor takes systemd's signals from any "
          "sender at their word (no sender check, no confirming method call): a forged PropertiesChanged "
          "ends a live session with a forged EXIT", supervisor=("no-signal-sender-check", "no-end-confirmation"),
          modules=_m("forged_signals")),
]

FAULTS += [
    # -- issue 30: what a Go developer would ship (reference-supervisor fault switches)
    Fault("unauth-rate-only", ("FLOOD-1",), "unauthenticated connections have a rate limit and no "
          "quota of connections held at once (the bucket's burst is the quota's 8): a slow flood piles up",
          supervisor=("unauth-rate-only",), modules=_m("flood")),
    Fault("nul-check-from-second-byte", ("PROTO-3",), "the NUL check of START's command and arguments "
          "starts at their second byte", supervisor=("nul-check-from-second-byte",), modules=_m("protocol")),
    Fault("orphans-binds-contains", ("ORPHAN-1",), "orphan cleanup stops strict-name units whose "
          "BindsTo= contains the supervisor, also those bound to another unit as well",
          supervisor=("orphans-binds-contains",), modules=_m("orphans")),
    Fault("exit-without-flush", ("CONC-2",), "once the unit has ended, EXIT is sent at once and the "
          "output not yet written to the client is dropped", supervisor=("exit-without-flush",),
          modules=_m("concurrency"), expect=("CONC-2", "CONC-3")),  # the endings test carries both
]

FAULTS += [
    # -- faults for the IDs the groups above leave without one
    Fault("any-process-of-the-peer-unit", ("PEER-1", "PEER-5"),
          "the supervisor accepts any process of the peer unit, not only MainPID",
          script_file="sup-any-process-of-the-unit.sh", modules=_m("peer")),
    Fault("lockout-after-flood", ("FLOOD-2",), "after a refused flood the supervisor refuses everyone for 60 s",
          supervisor=("lockout-after-flood",), modules=_m("flood")),
    Fault("slow-handshake", ("FLOOD-3",), "HELLO_OK takes longer than the 5 s bound",
          script_file="sup-slow-hello.sh", modules=_m("flood")),
    # -- SUITE-4: a lying STARTED names another unit; the suite must neither stop nor kill it
    Fault("started-names-another-unit", ("SUITE-4",), "STARTED names a system unit, not the session's",
          _victim("fault-victim.service"), script_file="sup-started-names.sh", modules=_m("cgroups"),
          after=_victim_untouched("fault-victim.service")),
    Fault("started-names-an-unbound-session", ("SUITE-4",),
          "STARTED names a strict-name session unit bound to another unit",
          _victim(VICTIM_SESSION, "-p BindsTo=dbus.service -p After=dbus.service"),
          script_file="sup-started-names.sh", modules=_m("cgroups"),
          after=_victim_untouched(VICTIM_SESSION)),
    Fault("session-unit-name-not-strict", ("UNIT-1",), "session unit names carry upper-case hex",
          script_file="sup-unit-name-uppercase.sh", modules=_m("session_units")),
    Fault("launcher-leaks-an-env-var", ("UNIT-6",), "the launcher adds a variable to the fixed environment",
          script_file="launcher-extra-env.sh", modules=_m("session_units")),
    Fault("launcher-path-value", ("UNIT-6",), "the launcher's PATH starts with a directory the "
          "service user writes (right name, wrong value)", script_file="launcher-path-value.sh",
          modules=_m("session_units")),
    Fault("session-stop-unbounded", ("CONC-3",), "session units keep systemd's default stop timeout",
          supervisor=("omit-prop:TimeoutStopUSec",), modules=_m("concurrency")),
    Fault("go-sum-missing", ("BUILD-2",), "the source tree has no go.sum to record",
          "rm /home/byk/.local/share/opencode-v2-pilot/supervisor/go.sum", modules=_m("builds"),
          expect=("BUILD-2", "SCOPE-1")),
]

FAULTS += [
    # -- RUNTIME-1: the candidate's runtime
    Fault("runtime-node24", ("RUNTIME-1",), "the runtime path holds plain Node 24, which runs the server script",
          script_file="runtime-node24.sh", modules=_m("runtime")),
    Fault("runtime-plain-node26", ("RUNTIME-1",), "the runtime is plain Node 26.4, not a single-executable app",
          script_file="runtime-plain-node26.sh", modules=_m("runtime")),
    Fault("preview-runs-a-copy", ("RUNTIME-1",), "the process on 14102 runs a copy of the SEA at another path",
          script_file="preview-runs-a-copy.sh", modules=_m("runtime")),
    Fault("runtime-bytes-changed", ("RUNTIME-1",), "the runtime binary no longer hashes to its pin",
          script_file="runtime-bytes-changed.sh", modules=_m("runtime")),
    Fault("candidate-unit-runs-other-path", ("RUNTIME-1",), "the candidate unit's ExecStart names another binary",
          f"sed -i 's|^ExecStart=[^ ]*|ExecStart=/usr/local/bin/opencode2-node|' {PILOT}/opencode-v2.service",
          modules=_m("runtime")),
    # -- CUT-1..3: the cutover preflight
    Fault("production-stopped", ("CUT-1",), "production is not running on 4096",
          "systemctl stop opencode.service", modules=_m("cutover")),
    Fault("candidate-stopped", ("CUT-1",), "the candidate preview is not running on 14102",
          "systemctl stop opencode-v2-preview.service", modules=_m("cutover"), expect=("CUT-1", "CUT-2")),
    Fault("candidate-unhealthy", ("CUT-1",), "the candidate's health says healthy=false",
          candidate=("unhealthy",), modules=_m("cutover")),
    Fault("plugin-failed", ("CUT-2",), "the local-pty plugin fails to activate",
          candidate=("plugin-failed",), modules=_m("cutover")),
    Fault("plugin-never-active", ("CUT-2",), "the plugins never leave 'loading'",
          candidate=("plugin-never-active",), modules=_m("cutover")),
    Fault("server-env-world-readable", ("CUT-3",), "server.env is mode 0644",
          f"chmod 0644 {PILOT}/server.env", modules=_m("cutover")),
    Fault("server-env-without-password", ("CUT-3",), "server.env has no OPENCODE_PASSWORD= line",
          f"printf 'OPENCODE_LOG_LEVEL=info\\n' > {PILOT}/server.env", modules=_m("cutover")),
    Fault("server-env-symlink", ("CUT-3",), "server.env is a symlink to a private copy",
          f"mv {PILOT}/server.env {PILOT}/server.env.real && ln -s server.env.real {PILOT}/server.env",
          modules=_m("cutover")),
    # -- server.env runs the user's code inside the runtime (issue 37 item 2): byk appends
    # NODE_OPTIONS=--require=<its preload> to its own server.env (still 0600, its own, with
    # the password); the preload makes the candidate's fault switches read as none.
    Fault("server-env-node-options", ("CUT-3",), "the service user appends NODE_OPTIONS=--require=<its "
          "preload> to server.env (no defect planted: the preload only loads)",
          "PTY_FAULT_SWITCH= PTY_FAULT_RESTART=0", script_file="user-preloads-node-options.sh",
          modules=_m("cutover"), says="sets NODE_OPTIONS (line 2"),
    Fault("server-env-node-options-hides-pty-in-process", ("CUT-3", "RUNTIME-2"), "the runtime opens the "
          "PTY in process (candidate switch pty-in-process), and the service user's NODE_OPTIONS=--require="
          "<its preload> in server.env, RUNTIME-2's runtime's only environment, would hide it",
          "PTY_FAULT_SWITCH=pty-in-process PTY_FAULT_RESTART=0", script_file="user-preloads-node-options.sh",
          modules=_m("cutover", "runtime_handoff"), says="NODE_OPTIONS"),
    Fault("server-env-node-options-restart-hides-plugin-failure", ("CUT-3", "CUT-2"), "local-pty fails to "
          "activate (candidate switch plugin-failed); the service user appends NODE_OPTIONS=--require=<its "
          "preload> to server.env and kills the candidate once: systemd restarts it with the preload, which "
          "makes the plugin list say active", "PTY_FAULT_SWITCH=plugin-failed PTY_FAULT_RESTART=1",
          script_file="user-preloads-node-options.sh", modules=_m("cutover"), says="NODE_OPTIONS"),
    Fault("server-env-node-options-restart-then-restored", ("CUT-2",), "local-pty fails to activate "
          "(candidate switch plugin-failed); the service user appends NODE_OPTIONS=--require=<its preload> to "
          "server.env, kills the candidate once (systemd restarts it with the preload) and puts server.env back; "
          "the preload renames NODE_OPTIONS in its own environ block (through /proc/self/mem: the runtime "
          "was made readable, 0755, so the restarted candidate is dumpable) and makes the plugin list say "
          "active (a red team's round five)",
          "PTY_FAULT_SWITCH=plugin-failed PTY_FAULT_RESTART=1 PTY_FAULT_RESTORE=1",
          script_file="user-preloads-node-options.sh", modules=_m("cutover"), says="has changed since"),
    # -- CUT-2 in the candidate API's real shapes (reference-candidate fault switches)
    Fault("activation-empty-200-plugins-failed", ("CUT-2",),
          "await-activation answers 200 with an empty body while local-pty has failed",
          candidate=("activation-empty-200-plugins-failed",), modules=_m("cutover")),
    Fault("plugin-list-bad-shape", ("CUT-2",), "GET /api/plugin lists {name, status} entries, a shape "
          "the candidate API does not have", candidate=("plugin-list-bad-shape",), modules=_m("cutover")),
    # -- RUNTIME-2: the runtime hands the connection and the directory to the fixed helper only.
    Fault("runtime-pty-in-process", ("RUNTIME-2",), "the runtime opens the PTY in process "
          "(upstream's way, local-pty inactive): no supervisor, no helper",
          candidate=("pty-in-process",), modules=_m("runtime_handoff")),
    Fault("runtime-connection-to-extra-child", ("RUNTIME-2",), "the runtime hands the supervisor "
          "connection to one more child besides the helper",
          candidate=("connection-to-extra-child",), modules=_m("runtime_handoff")),
    Fault("runtime-directory-to-extra-child", ("RUNTIME-2",), "the runtime hands the session's "
          "directory descriptor to one more child besides the helper",
          candidate=("directory-to-extra-child",), modules=_m("runtime_handoff")),
    # A watcher of the user's kills the extra child the moment it appears: no live sample
    # sees it; the trace of the runtime's tree must (session 31, red team against e21fde2).
    Fault("runtime-connection-to-extra-child-watched", ("RUNTIME-2",), "the runtime hands the supervisor "
          "connection to one more child (/bin/sleep 3600) besides the helper, and a watcher of the service "
          "user kills that child the moment it appears, before any sample of /proc",
          candidate=("connection-to-extra-child",), script_file="user-kills-extra-child.sh",
          modules=_m("runtime_handoff"), says="kept it across its exec of /bin/sleep", after=WATCHER_KILLED),
    Fault("runtime-directory-to-extra-child-watched", ("RUNTIME-2",), "the runtime hands the session's "
          "directory descriptor to one more child (/bin/sleep 3600) besides the helper, and a watcher of the "
          "service user kills that child the moment it appears, before any sample of /proc",
          candidate=("directory-to-extra-child",), script_file="user-kills-extra-child.sh",
          modules=_m("runtime_handoff"), says="kept it across its exec of /bin/sleep", after=WATCHER_KILLED),
    Fault("runtime-pty-in-process-bin-exchanged", ("RUNTIME-2",), "the runtime opens the PTY in process "
          "(candidate switch pty-in-process), and a watcher of the service user's exchanges the runtime's bin/ "
          "for one holding a wrapper the moment RUNTIME-2 reads server.env with the runtime held open: systemd "
          "runs the wrapper, which puts bin/ back and runs the hashed runtime with a preload that hides the "
          "switch (a red team's round seven)", "PTY_FAULT_SWITCH=pty-in-process PTY_FAULT_MODE=runtime2",
          script_file="user-swaps-runtime-bin.sh", modules=_m("runtime_handoff"),
          says="the runtime's path changed since its start", after=WATCHER_EXCHANGED),
    # -- ISO: same-UID isolation, and the declared session behaviour
    Fault("runtime-readable-made-undumpable-by-the-user", ("ISO-1",), "the runtime binary is 0755, so "
          "the candidate is dumpable at exec; the service user attaches to it and has it call "
          "prctl(PR_SET_DUMPABLE, 0), so every live probe is refused (a red team's round five)",
          script_file="runtime-readable-undumped.sh", modules=_m("isolation"),
          says="is readable by others (mode 0755)"),
    Fault("runtime-catches-sigusr1", ("ISO-1",), "the candidate runtime is a build without "
          "--disable-sigusr1: any process of the service user opens Node's inspector in it with SIGUSR1 "
          "(a red team's round six)", script_file="runtime-catches-sigusr1.sh", modules=_m("isolation"),
          says="catches SIGUSR1"),
    Fault("runtime-readable-at-exec-made-undumpable-then-0711", ("ISO-1",), "the runtime binary is 0755 "
          "while the candidate starts (dumpable); the service user has it call prctl(PR_SET_DUMPABLE, 0) and "
          "the binary is 0711 again afterwards (a red team's round six)", "PTY_FAULT_CHMOD_BACK=1",
          script_file="runtime-readable-undumped.sh", modules=_m("isolation"),
          says="from the candidate's start"),
    Fault("runtime-readable", ("ISO-1",), "the runtime binary is 0755, so the candidate is dumpable",
          script_file="runtime-readable.sh", modules=_m("isolation")),
    Fault("client-shares-connection", ("ISO-1",), "the client leaves a child holding its supervisor "
          "connection (seen only while a session is live)", script_file="client-shares-connection.sh",
          modules=_m("isolation")),
    Fault("session-private-network", ("ISO-2",), "sessions get a private network, unlike the declaration",
          supervisor=("session-private-network",), modules=_m("isolation")),
    Fault("session-private-network-report-forged", ("ISO-2",), "sessions get a private network, unlike "
          "the declaration, and a watcher of the service user's stops ISO-2's probe, writes a report of its own "
          "(network connected) into the session's terminal and kills the probe before it prints the real one "
          "(a red team's round seven)", supervisor=("session-private-network",),
          script_file="user-forges-iso2-report.sh", modules=_m("isolation"),
          # the probe answers on its own channel: killed, it did not report (ISO-2); stopped long enough
          # for the stop guard to see it, the run ends there (SUITE-5), whichever comes first
          expect=("ISO-2", "SUITE-5"),
          after=FORGER_REPLACED),
    # a blind red team's round eight (issue 37): the probe forged by ptrace, not through the terminal
    Fault("session-private-network-connect-forged", ("ISO-2",), "sessions get a private network, unlike "
          "the declaration, and a watcher of the service user's attaches to ISO-2's probe (an ordinary python3 "
          "of the user's) and makes its connect() to 127.0.0.1 return 0", supervisor=("session-private-network",),
          script_file="user-forges-iso2-connect.sh", modules=_m("isolation"),
          says="the inventory declares session_network: true",
          after=WATCHER_FORGED),
    Fault("runtime-bin-exchanged-for-a-wrapper-then-restored", ("ISO-1",), "the candidate is unhealthy and "
          "its plugin fails (candidate switches); the service user exchanges the runtime's bin/ (its own "
          "directory) for one holding a wrapper, kills the candidate so that systemd restarts it through the "
          "wrapper with a preload that hides the switches and blanks NODE_OPTIONS in its environ block, and "
          "puts bin/ back (a red team's round seven)", "PTY_FAULT_SWITCH='unhealthy plugin-failed' "
          "PTY_FAULT_MODE=candidate", script_file="user-swaps-runtime-bin.sh",
          modules=_m("cutover", "isolation"), says="whose name the service user could relink"),
    Fault("accepts-uid-while-mainpid-stopped", ("ISO-3",),
          "while the peer's MainPID is stopped, any process of the service user passes for it",
          supervisor=("accept-uid-while-stopped",), modules=_m("process_control")),
    # -- PLUGIN-1: the smoke harness under bun (words: the reference harness's header)
    Fault("plugin-harness-fails-one-run", ("PLUGIN-1",), "the smoke harness fails its 4th run of ten",
          f"printf 'fail-run:4\\n' > {PLUGIN_FAULTS}", modules=_m("plugin")),
    Fault("plugin-harness-hangs", ("PLUGIN-1",), "the smoke harness hangs on its 2nd run, past its deadline",
          f"printf 'hang-run:2\\n' > {PLUGIN_FAULTS}", modules=_m("plugin")),
    Fault("plugin-harness-in-plugin-dir", ("PLUGIN-1",), "the smoke harness runs (and writes its "
          "results) inside the auto-discovered plugin directory",
          f"printf 'start-in-plugins\\n' > {PLUGIN_FAULTS}", modules=_m("plugin")),
    Fault("plugin-fresh-helper-differs", ("PLUGIN-1",), "the installed helper is not what the source "
          "builds to, and the harness's identity check against the fresh build notices",
          f"printf 'x' >> {LIBEXEC}/opencode-pty-client", modules=_m("plugin")),
    Fault("plugin-bun-missing", ("PLUGIN-1",), "bun is not at the inventory's path",
          f"rm -f {BUN}", modules=_m("plugin")),
    Fault("plugin-bun-setuid-root", ("PLUGIN-1",), "bun is set-user-ID root (and the harness's own "
          "root refusal is off): run as the service user it would run as root",
          f"printf 'allow-root\\n' > {PLUGIN_FAULTS} && chmod 4755 {BUN}", modules=_m("plugin")),
    # -- PLUGIN-1: bun and the harness are the reviewed ones (issue 21 item 3)
    Fault("plugin-harness-exits-zero", ("PLUGIN-1",), "the smoke harness (the service user's file) is "
          "replaced by a script that only does process.exit(0)",
          f"printf 'process.exit(0)\\n' > {PILOT}/pty-smoke/pty-plugin-smoke.ts", modules=_m("plugin")),
    Fault("plugin-bun-owned-by-service-user", ("PLUGIN-1",), "bun belongs to the service user, who "
          "could put another program in its place between its check and its run",
          f"chown byk:byk {BUN}", modules=_m("plugin")),
    # -- PLUGIN-1: the harness in a cell of its own (issue 29): what the user plants or leaves
    Fault("plugin-user-plants-bun-config", ("PLUGIN-1",), "the plugin's first run fails, and for the whole "
          "run the service user plants a bunfig.toml and .bunfig.toml whose preload ends bun with exit 0, and "
          "a .env, wherever it can reach (the run directories, its processes' cwd and /tmp, /tmp, its HOME): "
          "PLUGIN-1 must see the harness's own failure, not the plant's exit 0",
          f"printf 'fail-run:1\\n' > {PLUGIN_FAULTS}", script_file="user-plants-bun-config.sh",
          modules=_m("plugin"), says="PLUGIN-1: run 1/10: ended with exit 1", deadline_s=600,
          after="cat /var/lib/pty-fault/planter.log"),
    Fault("plugin-user-plants-escaping-preload", ("PLUGIN-1",), "as plugin-user-plants-bun-config, the "
          "planted preload also starting `setsid sleep 600` holding bun's output open (issue 29: it hung the "
          "run): PLUGIN-1 must see the harness's own failure, in time",
          f"printf 'fail-run:1\\n' > {PLUGIN_FAULTS}; PTY_FAULT_PRELOAD=escape",
          script_file="user-plants-bun-config.sh", modules=_m("plugin"),
          says="PLUGIN-1: run 1/10: ended with exit 1", deadline_s=600, after="cat /var/lib/pty-fault/planter.log"),
    # -- PLUGIN-1: bun imports exactly the reviewed plugin bytes, and nothing of the user's steers a
    # run (red team against e21fde2): the defect each time is the harness failing its first run;
    # the user's action hides it, and PLUGIN-1 must still see it
    Fault("plugin-harness-fails-first-run", ("PLUGIN-1",), "the smoke harness fails its first run "
          "(the defect the user hides in the faults below, with no one hiding it)",
          f"printf 'fail-run:1\\n' > {PLUGIN_FAULTS}", modules=_m("plugin"),
          says="PLUGIN-1: run 1/10: ended with exit 1", deadline_s=600),
    Fault("plugin-user-plants-plugin-tsx", ("PLUGIN-1",), "the harness fails its first run, and the "
          "service user puts a pty.tsx beside the reviewed pty.ts in the plugin directory that re-exports "
          "it and makes the fault switch read as unset (bun resolves .../plugins/pty to .tsx first)",
          f"printf 'fail-run:1\\n' > {PLUGIN_FAULTS}", script_file="user-plants-plugin-tsx.sh",
          modules=_m("plugin"), says="PLUGIN-1: run 1/10: ended with exit 1", deadline_s=600),
    Fault("plugin-user-patches-after-scope", ("PLUGIN-1",), "the harness fails its first run, and a "
          "watcher of the service user's (not dumpable, inotify on the plugin directory) prepends to pty.ts, "
          "right after SCOPE-1 read it, a patch that makes the fault switch read as unset, and puts the "
          "reviewed bytes back 20 s after the last harness run",
          f"printf 'fail-run:1\\n' > {PLUGIN_FAULTS}", script_file="user-patches-plugin-after-scope.sh",
          modules=_m("builds", "plugin"), says="PLUGIN-1: run 1/10: ended with exit 1", deadline_s=900,
          # the patch was in place while harness runs happened: the suite was not saved by timing
          after="i=0; until grep -q RESTORED /var/lib/pty-fault/patcher.log || [ $i -ge 600 ]; do "
                "i=$((i+1)); sleep 0.1; done; cat /var/lib/pty-fault/patcher.log; "
                "grep -q PATCHED /var/lib/pty-fault/patcher.log && "
                "grep -Eq 'and [1-9][0-9]* harness runs' /var/lib/pty-fault/patcher.log"),
    Fault("plugin-user-bumps-home-run-counter", ("PLUGIN-1",), "the harness fails its first run, and the "
          "service user writes 100 into the run counter the harness kept in its home "
          "(~/.pty-smoke-fault-runs), so that no run is the first",
          f"printf 'fail-run:1\\n' > {PLUGIN_FAULTS}; "
          "runuser -u byk -- sh -c 'printf 100 > /home/byk/.pty-smoke-fault-runs'",
          modules=_m("plugin"), says="PLUGIN-1: run 1/10: ended with exit 1", deadline_s=600),
    Fault("plugin-user-floods-run-counter", ("PLUGIN-1",), "the harness fails its first run, and the "
          "service user asks the harness's run counter (root's, on a socket) for numbers 100 times before "
          "the suite and on and on during it, so that, were it counted, no run would be the first",
          f"printf 'fail-run:1\\n' > {PLUGIN_FAULTS}", script_file="user-floods-run-counter.sh",
          modules=_m("plugin"), says="PLUGIN-1: run 1/10: ended with exit 1", deadline_s=600,
          after="cat /var/lib/pty-fault/flood.log; grep -q '^REFUSED' /var/lib/pty-fault/flood.log && "
                "! grep -q '^RUN' /var/lib/pty-fault/flood.log"),
    Fault("plugin-harness-leaves-a-process", ("PLUGIN-1",), "every harness run leaves a setsid'd sleep 600 "
          "behind, holding the run's output open: the run ends in time, naming it",
          f"printf 'leave-process\\n' > {PLUGIN_FAULTS}", modules=_m("plugin"),
          says="left processes running after it exited (killed with its cgroup): pid ", deadline_s=600),
    # a blind red team's round seven (issue 37): the leftover killed before the suite looks at the
    # run's cgroup made 31 % of such runs read as clean; the run's trace sees who killed it
    Fault("plugin-harness-leftover-killed-by-the-user", ("PLUGIN-1",), "every harness run leaves a "
          "setsid'd sleep 600 behind, and a watcher of the service user's kills it the moment it appears, "
          "so that the run's cgroup is empty when the suite looks",
          f"printf 'leave-process\\n' > {PLUGIN_FAULTS}; PTY_FAULT_KILL='/bin/sleep 600'",
          script_file="user-kills-extra-child.sh", modules=_m("plugin"),
          says="was killed by SIGKILL, which no process of the run sent", deadline_s=600, after=WATCHER_KILLED),
    # -- RUNTIME-2: the runtime it runs is the one RUNTIME-1 hashed (issue 21 item 4)
    Fault("runtime-swapped-before-handoff", ("RUNTIME-2",), "the service user renames a working "
          "runtime one byte longer into runtime.binary's place right after RUNTIME-1 read it, and puts "
          "the original back once RUNTIME-2 let go of it",
          script_file="runtime-swapped-before-handoff.sh", modules=_m("runtime", "runtime_handoff"),
          after=RUNTIME_RESTORED),
    # -- RUNTIME-2: its environment comes only from server.env (issue 21 item 9)
    Fault("candidate-env-file-root-secret", ("RUNTIME-2",), "the candidate unit (the service user's "
          "file) adds an EnvironmentFile= naming a root-only file, and one of its own whose "
          "NODE_OPTIONS makes the runtime write its environment to the user's file",
          vault(ENV_SECRET) + f" && printf 'NODE_OPTIONS=--require=/home/byk/dump-env.js\\n' > {PILOT}/fault.env"
          " && printf 'require(\"fs\").writeFileSync(\"/home/byk/stolen-env\", JSON.stringify(process.env))\\n'"
          " > /home/byk/dump-env.js && chown byk:byk /home/byk/dump-env.js"
          f" {PILOT}/fault.env && sed -i 's|^EnvironmentFile=.*|&\\nEnvironmentFile={VAULT}\\n"
          f"EnvironmentFile={PILOT}/fault.env|' {PILOT}/opencode-v2.service"
          f" && chown byk:byk {PILOT}/opencode-v2.service",
          modules=_m("runtime_handoff"), secret=ENV_SECRET,
          after=f"! grep -qs '{ENV_SECRET.split('=', 1)[1]}' /home/byk/stolen-env"),
    # a blind red team's round six: the password went into RUNTIME-1's and RUNTIME-2's evidence
    Fault("user-writes-its-password-into-the-candidate-unit", ("SCOPE-1", "SUITE-4"),
          "the service user appends server.env's password as an argument of the candidate unit's "
          "ExecStart= (its own file), which the suite records as evidence",
          f"runuser -u byk -- sh -c '{appended_to_execstart(f'--leak {REFERENCE_PASSWORD}')}' "
          f"&& grep -q -- '--leak {REFERENCE_PASSWORD}' {PILOT}/opencode-v2.service",
          modules=_m("builds", "runtime", "runtime_handoff"), expect=("SCOPE-1",), secret=REFERENCE_PASSWORD),
    # a blind red team's round nine (issue 37): a hard-linked server.env left nothing to redact
    Fault("user-writes-its-password-into-the-candidate-unit-server-env-linked", ("SCOPE-1", "SUITE-4"),
          "the service user links server.env to a second name of its own (the suite reads no password from a "
          "hard link) and appends the password as an argument of the candidate unit's ExecStart=",
          f"runuser -u byk -- sh -c 'ln {PILOT}/server.env {PILOT}/.server.env.link && "
          f"{NOTE_IN_UNIT}' "
          f"&& grep -q -- '--note {REFERENCE_PASSWORD}' {PILOT}/opencode-v2.service",
          modules=_m("builds", "runtime", "runtime_handoff"), expect=("SCOPE-1",), secret=REFERENCE_PASSWORD),
    # the same round's attacks 4, 5 and 10: the password systemd gives the candidate is not the one a
    # line-by-line reading takes, is too short to look like one, or changes after the suite read it
    Fault("user-writes-its-password-behind-a-decoy-line", ("SCOPE-1", "SUITE-4"),
          "the service user rewrites server.env as a decoy `OPENCODE_PASSWORD=` line followed by "
          "`OPENCODE_PASSWORD =<password>` (systemd trims the blanks and keeps the last) and appends the "
          "password as an argument of the candidate unit's ExecStart=",
          f"runuser -u byk -- sh -c 'printf \"OPENCODE_PASSWORD=decoy-not-the-password\\nOPENCODE_PASSWORD ="
          f"{REFERENCE_PASSWORD}\\n\" > {PILOT}/server.env && "
          f"{NOTE_IN_UNIT}' "
          f"&& grep -q '^OPENCODE_PASSWORD =' {PILOT}/server.env",
          modules=_m("builds", "runtime", "runtime_handoff"), expect=("SCOPE-1",), secret=REFERENCE_PASSWORD),
    Fault("user-writes-a-three-character-password", ("SCOPE-1", "SUITE-4"),
          f"the service user gives server.env the password `{SHORT_SECRET}` (three characters) and appends it as "
          "an argument of the candidate unit's ExecStart=",
          f"runuser -u byk -- sh -c 'sed -i \"s|^OPENCODE_PASSWORD=.*|OPENCODE_PASSWORD={SHORT_SECRET}|\" "
          f"{PILOT}/server.env && {appended_to_execstart(f'--note {SHORT_SECRET}')}' "
          f"&& grep -q '^OPENCODE_PASSWORD=...$' {PILOT}/server.env",
          modules=_m("builds", "runtime", "runtime_handoff"), expect=("SCOPE-1",), secret=SHORT_SECRET),
    Fault("user-rotates-its-password-mid-run", ("SCOPE-1", "SUITE-4"),
          "the service user appends a note to its candidate unit's ExecStart= and, 25 s into the run (after "
          "the suite read server.env), writes a new password into server.env and into that note",
          f"PTY_FAULT_SECRET={ROTATED_SECRET}", script_file="user-rotates-its-password-mid-run.sh",
          modules=_m("builds", "runtime", "runtime_handoff"), expect=("SCOPE-1",), secret=ROTATED_SECRET,
          after="test -e /home/byk/.pty-fault-rotated"),
    # round eleven (issue 37): server.env read short of systemd, a link named after the password,
    # the password cut one character short by an excerpt; a backslash in the value; server.env a link
    Fault("user-pads-server-env-past-the-read", ("SCOPE-1", "SUITE-4"),
          "the service user rewrites server.env as about 71 KiB of comment lines and then its password line "
          "(systemd reads the whole file), and appends the password to the candidate unit's ExecStart=",
          f"runuser -u byk -- sh -c 'pw=$(sed -n \"s/^OPENCODE_PASSWORD=//p\" {PILOT}/server.env | tail -n 1) && "
          f"{{ for i in $(seq 1100); do printf \"# %064d\\n\" $i; done; printf \"OPENCODE_PASSWORD=%s\\n\" \"$pw\"; }} "
          f"> {PILOT}/server.env.new && cat {PILOT}/server.env.new > {PILOT}/server.env && "
          f"rm {PILOT}/server.env.new && "
          f"{appended_to_execstart('--note $pw')}' "
          f"&& [ $(stat -c %s {PILOT}/server.env) -gt 70000 ]",
          modules=_m("builds", "runtime", "runtime_handoff"), expect=("SCOPE-1",), secret=REFERENCE_PASSWORD),
    Fault("user-names-a-link-after-its-password", ("SCOPE-1", "SUITE-4"),
          "the service user makes a link named `<password>.go` in its supervisor source tree: the gate's "
          "own blocker names it (the gate's text, not a test's)",
          f"runuser -u byk -- sh -c 'ln -s /dev/null {PILOT}/supervisor/cmd/{REFERENCE_PASSWORD}.go'",
          modules=_m("builds"), expect=("SCOPE-1",), secret=REFERENCE_PASSWORD),
    Fault("user-cuts-its-password-at-the-excerpt", ("SCOPE-1", "SUITE-4"),
          "the service user pads its candidate unit's ExecStart= so that the suite's 300-character excerpt of "
          "it ends one character before the end of the password it appends",
          f"PTY_FAULT_PILOT={PILOT}", script_file="user-cuts-its-password-at-the-excerpt.sh",
          modules=_m("builds", "runtime", "runtime_handoff"), expect=("SCOPE-1",), secret=REFERENCE_PASSWORD[:-1]),
    Fault("user-escapes-its-password-in-server-env", ("SCOPE-1", "SUITE-4"),
          "the service user rewrites its password line with a backslash inside the value (systemd drops it: "
          "the password is unchanged) and appends the password to the candidate unit's ExecStart=",
          f"runuser -u byk -- sh -c 'printf \"%s\\n\" \"OPENCODE_PASSWORD=reference-host-not-a-se\\\\cret\" "
          f"> {PILOT}/server.env && "
          f"{NOTE_IN_UNIT}' "
          f"&& grep -q 'se.cret' {PILOT}/server.env",
          modules=_m("builds", "runtime", "runtime_handoff"), expect=("SCOPE-1",), secret=REFERENCE_PASSWORD),
    Fault("user-links-server-env", ("SCOPE-1", "SUITE-4"),
          "the service user moves server.env aside and makes server.env a link to it (never opened by the "
          "suite; systemd follows it) and appends the password to the candidate unit's ExecStart=",
          f"runuser -u byk -- sh -c 'mv {PILOT}/server.env {PILOT}/.real.env && ln -s .real.env {PILOT}/server.env && "
          f"{NOTE_IN_UNIT}' "
          f"&& [ -L {PILOT}/server.env ]",
          modules=_m("builds", "runtime", "runtime_handoff"), expect=("SCOPE-1",), secret=REFERENCE_PASSWORD),
    Fault("server-env-password-continued-on-the-next-line", ("CUT-3",), "the service user rewrites its "
          "server.env as `OPENCODE_PASSWORD=\\` and, on the next line, a password of its own followed by `=`, "
          "and kills the candidate: systemd joins the lines, a line-by-line reading takes the password for a "
          "variable's name (a red team's round seven)", f"PTY_FAULT_TAIL={CONTINUED_SECRET}",
          script_file="user-continues-server-env-line.sh", modules=_m("cutover"),
          says="a backslash or a quote", secret=CONTINUED_SECRET),
]

# -- SUITE-4: the service user points root's reads at what only root may read
FAULTS += [
    Fault("git-refs-link-to-root-secret", ("SCOPE-3", "SUITE-4"),
          "the user makes .git/refs a link into a root-only directory and HEAD name a file there",
          vault(GIT_SECRET) + f" && cd {CODE}/.git && mv refs refs.real && "
          f"ln -s {VAULT.rsplit('/', 1)[0]} refs && printf 'ref: refs/secret\\n' > HEAD && "
          "chown -h byk:byk refs HEAD",
          modules=_m("builds"), expect=("SCOPE-3",), secret=GIT_SECRET),
    Fault("pilot-link-to-root-secret", ("SCOPE-1", "SUITE-4"),
          "a file of the source manifest made a link to a root-only file (its hash would go to the evidence)",
          vault(TREE_SECRET) + f" && cd {PILOT}/config/opencode && mv tsconfig.json tsconfig.real && "
          f"ln -s {VAULT} tsconfig.json && chown -h byk:byk tsconfig.json",
          modules=_m("builds"), expect=("SCOPE-1",), secret=TREE_SECRET),
    Fault("pilot-hardlink-to-root-secret", ("SCOPE-1", "SUITE-4"),
          "with fs.protected_hardlinks=0, a file of the source manifest made a hard link to a root-only "
          "file (the file itself under the user's name: its hash would go to the evidence)",
          vault(HARDLINK_SECRET) + f" && cd {PILOT}/config/opencode && "
          f"rm tsconfig.json && ln {VAULT} tsconfig.json && stat -c '%n %h links %U %a' tsconfig.json",
          modules=_m("builds"), expect=("SCOPE-1",), secret=HARDLINK_SECRET),
    Fault("pilot-fifo", ("SCOPE-1", "SUITE-4"),
          "a file of the source manifest made a FIFO (opening it would hang the gate)",
          f"cd {PILOT}/config/opencode && rm tsconfig.json && mkfifo -m 0644 tsconfig.json && "
          "chown byk:byk tsconfig.json",
          modules=_m("builds"), expect=("SCOPE-1",)),
    # issue 29 item 5: the manifest walked recursively, bounded in entries only; this
    # chain raised RecursionError out of the gate's decision: INTERNALERROR, no report
    Fault("source-tree-1200-deep", ("SCOPE-1", "BUILD-1", "SUITE-2"),
          "a chain of directories 1,200 deep in the supervisor source: refused naming "
          "limits.tree_depth, in a report that is written (no RecursionError, no INTERNALERROR)",
          f"cd {PILOT}/supervisor && mkdir -p \"$(printf 'd/%.0s' $(seq 1200))\" && "
          "chown -R byk:byk d",
          modules=_m("builds"), expect=("SCOPE-1",)),
]


# SUITE-4, SUITE-5: the service user against root's temporary directories (issue 21 item 11)
SWAP_SECRET = "pty-acceptance-swap-secret-4e1f27"
SWAPS_WITHSTOOD = """systemctl stop pty-fault-swapper.service || true
echo '--- the swapper log'; cat /var/lib/pty-fault/swapper.log
echo '--- /tmp'; ls -la /tmp
bad=0
grep -q '^REFUSED /tmp/pty-acceptance-run-' /var/lib/pty-fault/swapper.log || {
    echo 'the swapper never found a workspace of the suite: the fault proved nothing'; bad=1; }
if grep '^SWAPPED' /var/lib/pty-fault/swapper.log; then echo 'it replaced a directory the suite made'; bad=1; fi
left=$(find /tmp -maxdepth 1 \\( -name 'pty-acceptance-*' -o -type p \\) -print)
if [ -n "$left" ]; then echo "left in /tmp: $left"; bad=1; fi
exit $bad"""
FAULTS += [
    Fault("user-swaps-temp-dirs-for-fifos", ("SUITE-4", "SUITE-5"),
          "for the whole run the service user renames every directory of its own named pty-acceptance-* "
          "it finds (in /tmp, or as the cwd of its processes), puts a FIFO in its place, and plants a "
          "link to a root-only secret in the workspaces: the suite must end, READY, leaving nothing",
          vault(SWAP_SECRET), script_file="user-swaps-temp-dirs.sh", modules=FULL, kill="withstood",
          after=SWAPS_WITHSTOOD, secret=SWAP_SECRET, deadline_s=900),
]

# SUITE-5: the whole run bounded; a process of the suite's own stopped from outside is
# named, never waited for (issue 37 item 6)
STOPPER_LOG = ("systemctl stop pty-fault-stopper.service || true; echo '--- the stopper log'; "
               "head -40 /var/lib/pty-fault/stopper.log; grep -q '^STOPPED' /var/lib/pty-fault/stopper.log")
FAULTS += [
    Fault("user-stops-every-new-process", ("SUITE-5",), "for the whole run the service user sends SIGSTOP "
          "to every process of its own the moment it appears (peer agents, probes, harness, runtime, "
          "sessions): the run was still going 600 s later; it must end in time, naming the stopped process",
          script_file="user-stops-every-new-process.sh", modules=FULL, deadline_s=600,
          first_cause="a process of the suite's own was stopped from outside", after=STOPPER_LOG),
]

# UNIT-5 (session 31): a process that exits between a session's listing of /proc and
# its read is gone, not another user's process; the user crowds /proc and churns it
CHURN_WITHSTOOD = """bad=0
systemctl is-active --quiet pty-fault-churn.service || { echo 'the churn did not last the whole run'; bad=1; }
systemctl stop pty-fault-churn.service || true
echo '--- the churn log'; cat /var/lib/pty-fault/churn.log
grep -q '^BURST' /var/lib/pty-fault/churn.log || {
    echo 'the churn never saw the probe: the fault proved nothing'; bad=1; }
if grep -q 'listed, then gone before they were read (not judged): \\[' /opt/pty-acceptance/out/reports/*.xml; then
    echo 'the probe saw processes exit between its listing of /proc and its read'
else
    echo 'no process exited between the probe listing /proc and reading it: the fault proved nothing'; bad=1
fi
exit $bad"""
FAULTS += [
    Fault("user-churns-processes", ("UNIT-5",),
          "for the whole run the service user keeps 1,000 idle processes and spawns short-lived ones, "
          "in bursts when the session probe starts: processes a session lists in /proc exit before "
          "they are read; gone is gone (never another user's process): the suite must end READY",
          script_file="user-churns-processes.sh", modules=FULL, kill="withstood", after=CHURN_WITHSTOOD,
          deadline_s=900),
]

FAULTS += [
    # -- CONC-3: stops, bounded from both sides (issue 29 item 10, issue 30 item 2)
    Fault("session-stop-timeout-infinity", ("CONC-3",), "an administrator's drop-in for every "
          "opencode-pty-* unit sets TimeoutStopSec=infinity: a stop that SIGTERM does not end never "
          "ends (the suite waited on it for over 15 minutes); the run must end in its usual time",
          "mkdir -p /etc/systemd/system/opencode-pty-.service.d && printf '[Service]\\nTimeoutStopSec="
          "infinity\\n' > /etc/systemd/system/opencode-pty-.service.d/stop.conf && systemctl daemon-reload",
          modules=FULL, deadline_s=600),
    Fault("session-stop-no-grace", ("CONC-3",), "session units are SIGKILLed 5 ms after SIGTERM "
          "(TimeoutStopUSec= microseconds taken for milliseconds)", supervisor=("session-stop-no-grace",),
          modules=_m("stops")),
    Fault("session-stop-sigkill", ("CONC-3",), "session units are stopped by SIGKILL, never SIGTERM "
          "(KillSignal=SIGKILL; TimeoutStopSec unchanged)", supervisor=("session-stop-sigkill",),
          modules=_m("stops")),
    # a blind red team's round nine (issue 37): the stopped command attached to by the user, named as
    # if it had seen SIGTERM, a thread of it parked past the SIGKILL
    Fault("session-stop-sigkill-grace-forged", ("CONC-3",), "session units are stopped by SIGKILL, never "
          "SIGTERM, and a watcher of the service user's attaches to CONC-3's stop-test command, names it as if "
          "it had seen SIGTERM and parks an injected thread of it in a ptrace stop for 3.6 s past the SIGKILL",
          supervisor=("session-stop-sigkill",), script_file="user-parks-a-thread-in-the-stopped-command.sh",
          modules=_m("stops"), after=WATCHER_FORGED),
    # the same round's attacks 6 and 7: a defect the user hides by holding a session's script(1)
    # past its exit, and one it hides by ending a session itself the way a stop would
    Fault("exit-without-flush-script-exit-parked", ("SUITE-5",), "once the unit has ended, EXIT is "
          "sent at once and the output not yet written is dropped; a watcher of the service user's parks an "
          "injected thread of each counted-lines session's script(1) in a ptrace stop for 15 s past its exit "
          "(a zombie leader, never in state T): the unit outlives the suite's bound, which reads every byte "
          "first", supervisor=("exit-without-flush",), script_file="user-parks-the-session-exit.sh",
          modules=FULL, first_cause="a process of the suite's own was stopped from outside",
          after=("systemctl stop pty-fault-parker.service || true; cat /var/lib/pty-fault/parker.log; "
                 "grep -q '^PARKED' /var/lib/pty-fault/parker.log")),
    Fault("user-parks-every-session-exit", ("SUITE-5",), "for the whole run a watcher of the service user's "
          "parks an injected thread of every session's script(1) in a ptrace stop and never lets it go (a "
          "zombie leader, never in state T): every wait on a session's end would run to its bound, and the "
          "units' own stops could not end (the same round's attack 8); the run must end in time, naming the stop",
          "PTY_FAULT_HOLD=never PTY_FAULT_EVERY=1", script_file="user-parks-the-session-exit.sh", modules=FULL,
          deadline_s=900, first_cause="a process of the suite's own was stopped from outside",
          after=("systemctl stop pty-fault-parker.service || true; head -40 /var/lib/pty-fault/parker.log; "
                 "grep -q '^PARKED' /var/lib/pty-fault/parker.log")),
    # round ten (issue 37): the suite's staged Python found the user's library in /tmp, whose
    # sitecustomize handed the suite a socketpair and relayed the real connection, mending defects
    # round eleven (issue 37), attack 4: the saturating writer's terminal stopped (TCOOFF), no signal
    Fault("unbounded-output-terminal-stopped", ("FLOOD-4", "SUITE-4"), "the supervisor buffers a session's "
          "output without bound; a watcher of the service user's stops the output of FLOOD-4's saturating "
          "writer's terminal (TCXONC TCOOFF on its pts) once it has written, and again every 2 ms",
          supervisor=("unbounded-output",), script_file="user-stops-the-flood-terminal.sh",
          modules=_m("flood"), says="its terminal's output was stopped",
          after=("systemctl stop pty-fault-flowstopper.service || true; cat /var/lib/pty-fault/flowstopper.log; "
                 "grep -q '^STOPPED' /var/lib/pty-fault/flowstopper.log")),
    Fault("user-plants-a-stdlib-in-tmp", ("PROTO-1", "PROTO-3", "PEER-2", "ISO-3"), "the limits off by one, a "
          "NUL checked from the second byte, the slice pin skipped and a stopped MainPID's identity lent; the "
          "service user plants /tmp/lib/python3.X (the host's library linked, a sitecustomize of its own) "
          "where the suite's staged Python would look for its library, and runs a relay that carries the "
          "agents' connections, mending each defect on the way",
          script_file="user-plants-a-stdlib-in-tmp.sh", modules=_m("protocol", "peer", "process_control"),
          after="cat /tmp/red10-relay.log; test -S /tmp/red10-relayd.sock"),
    Fault("no-stop-on-disconnect-stop-played", ("CONC-3",), "a closed connection leaves its unit running; a "
          "watcher of the service user's holds a copy of each session's end of the supervisor's socketpair "
          "(pidfd_getfd on its script(1)) and, when the supervisor's end closes, ends the session itself: "
          "SIGTERM to each process, 5.5 s, SIGKILL", supervisor=("no-stop-on-disconnect",),
          script_file="user-plays-the-stop-on-disconnect.sh", modules=_m("stops", "cgroups", "concurrency"),
          says="systemd queued no job for the unit",
          after=("systemctl stop pty-fault-stopplayer.service || true; cat /var/lib/pty-fault/stopplayer.log; "
                 "grep -q '^STOPPED' /var/lib/pty-fault/stopplayer.log")),
]

# Issue 37 item 3: a listener is judged only when it is its unit's own (host/unitowner.py)
SQUAT_STOOD = """bad=0
systemctl show -p ActiveState -p Result opencode-v2-preview.service
[ "$(systemctl show -p ActiveState --value opencode-v2-preview.service)" = failed ] || {
    echo 'the candidate unit did not stay failed: the user did not hold the port for the run'; bad=1; }
systemctl is-active --quiet pty-fault-squat.service || { echo "byk's server did not last the run"; bad=1; }
grep '^pid ' /home/byk/.pty-fault/preloaded || { echo 'the preload never ran'; bad=1; }
systemctl stop pty-fault-squat.service || true
exit $bad"""
FAULTS += [
    Fault("user-serves-candidate-port-after-start-limit", ("CUT-1", "CUT-2", "RUNTIME-1", "ISO-1"),
          "the service user kills the candidate preview until systemd's start limit leaves its unit "
          "failed, then serves 14102 with its own run of the pinned runtime (same executable, same uid, "
          "server.env's environment, a preload of its own): every fact but the unit is the candidate's",
          script_file="user-serves-candidate-port-after-start-limit.sh",
          modules=_m("cutover", "runtime", "isolation"), says="opencode-v2-preview.service's own",
          after=SQUAT_STOOD),
    Fault("user-serves-production-port", ("CUT-1",),
          "production stopped (as an administrator might), a server of the service user answers 200 "
          "with a body on every path of 4096", script_file="user-serves-production-port.sh",
          modules=_m("cutover"), says="is not opencode.service's own",
          after="systemctl is-active --quiet pty-fault-production.service"),
]


BY_ID = {f.id: f for f in FAULTS}


def apply_script(f: Fault) -> str:
    """The --before-suite script that applies a fault."""
    lines = ["set -eu"]
    if f.script:
        lines.append(f.script)
    common = (FAULT_DIR / "common.sh").read_text()
    if f.script_file:
        body = (FAULT_DIR / f.script_file).read_text()
        lines.append(body.replace(". /opt/dev-script-0/common.sh", common))
    if f.supervisor:
        lines += supervisor_switch_lines(f.supervisor)
    if f.candidate:
        words = "\\n".join(f.candidate)
        lines += ["mkdir -p /etc/opencode-reference",
                  f"printf '{words}\\n' > /etc/opencode-reference/candidate-faults",
                  "systemctl restart opencode-v2-preview.service", "wait_port 14102"]
        if not f.script_file:
            lines.insert(1, common)  # wait_port
    return "\n".join(lines) + "\n"

# What CI runs (README's test command, docs/reference-host.md "What CI runs"): a subset that
# touches every requirement group the suite checks on the reference host, each
# by a fault narrowed to its modules (a full-suite run is ~3 min of one of the
# two slots), two on the full suite: a supervisor speaking another framing
# (every session module must fail on it) and a stopped supervisor (the whole
# suite must fail closed, in seconds). The client made group-writable on the
# full suite is tests/test_reference_host.py's. Where two faults of the subset
# broke the same requirement group in the same module, one stays (session 32:
# CI had grown to 42 of its 40 minutes).
# `pty-acceptance mutants` without --only runs the whole catalogue.
CI_SUBSET = [
    "supervisor-other-framing",  # full suite
    "supervisor-stopped",  # full suite, fails closed at once
    "skip-cgroup-check",
    "client-replaced-by-other-build", "drop-in-owned-by-service-user",
    "source-file-changed",
    "client-sends-two-fds", "no-unauth-limit", "exit-always-zero",
    "lookalike-session-unit", "marker-dir-group-writable", "supervisor-new-privileges",
    "capacity17", "session-killmode-process", "forged-signals-end-sessions",
    "runtime-node24", "plugin-failed", "server-env-world-readable", "runtime-readable",
    "session-private-network", "launcher-keeps-fd3",
    "runtime-pty-in-process", "accepts-uid-while-mainpid-stopped",
    "supervisor-runs-a-root-owned-copy",
    "plugin-user-plants-bun-config",
    "session-device-allow-drop-in",
]
