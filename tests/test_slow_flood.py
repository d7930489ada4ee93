"""The peer agent's slow flood (FLOOD-1: the quota is a cap on connections held
at once, apart from the rate), against a stand-in listener: one that holds at
most its quota of silent connections and refuses the rest is seen holding
exactly its quota at most; one with no quota is seen holding more; the held
connections it closes after its HELLO timeout are timed."""
import importlib.util
import shutil
import socket
import sys
import threading
import time

import pytest

from pty_acceptance.supervisor import protocol as p

from conftest import REPO

QUOTA, HELLO_S, WINDOW_S = 2, 1.0, 0.2
PKG = REPO / "acceptance" / "pty_acceptance"


@pytest.fixture
def agent_module(tmp_path, monkeypatch):
    """agent.py staged beside protocol.py, as the suite stages it for the peer."""
    shutil.copy(PKG / "probes" / "agent.py", tmp_path / "agent.py")
    shutil.copy(PKG / "supervisor" / "protocol.py", tmp_path / "protocol.py")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "protocol", raising=False)
    spec = importlib.util.spec_from_file_location("staged_agent", tmp_path / "agent.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class StandIn:
    """A listener that holds silent connections for HELLO_S (then ERROR PROTOCOL
    and close), at most `quota` at once (None: no quota); the rest get ERROR
    RATE_LIMITED and are closed at once."""

    def __init__(self, path: str, quota: int | None):
        self.quota, self.held, self.stop = quota, [], threading.Event()
        self.ln = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ln.bind(path)
        self.ln.listen(64)
        self.ln.settimeout(0.02)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            now = time.monotonic()
            for c, since in [h for h in self.held if now - h[1] >= HELLO_S]:
                c.sendall(p.encode(p.T.ERROR, b"\0\2timed out"))
                c.close()  # closed before its place is given back, as the supervisors do
                self.held.remove((c, since))
            try:
                c, _ = self.ln.accept()
            except TimeoutError:
                continue
            if self.quota is not None and len(self.held) >= self.quota:
                c.sendall(p.encode(p.T.ERROR, b"\0\6too many"))
                c.close()
            else:
                self.held.append((c, time.monotonic()))

    def close(self):
        self.stop.set()
        self.thread.join(5)
        for c, _ in self.held:
            c.close()
        self.ln.close()


@pytest.mark.parametrize("quota", [QUOTA, None])
def test_the_slow_flood_sees_what_is_held_at_once(agent_module, tmp_path, quota):
    path = str(tmp_path / "sup.sock")
    standin = StandIn(path, quota)
    try:
        r = agent_module.Agent(None).op_slow_flood(
            {"path": path, "interval": HELLO_S / (3 * QUOTA), "duration": 2 * HELLO_S + WINDOW_S,
             "window": WINDOW_S}, [])
    finally:
        standin.close()
    assert r["opened"] >= 12 and not r["connect_errors"], r
    if quota is None:  # a rate alone: three quotas' worth pile up before the first expires
        assert r["max_held"] > QUOTA and "ERROR 6" not in r["answers"], r
    else:
        assert r["max_held"] == QUOTA and r["answers"]["ERROR 6"] >= 6, r
    assert r["answers"]["ERROR 2"] == len(r["held_closed_after_s"]) >= QUOTA, r
    assert all(HELLO_S <= s < HELLO_S + 1.0 for s in r["held_closed_after_s"]), r
