"""pty_acceptance.candidate.opencode_api against an in-process stand-in server."""

import base64
import json
import socket
import time

import pytest

from opencode_standin import Behaviour, StandIn
from pty_acceptance.candidate import opencode_api as api

PW = "s3cret-Pässword-0123456789"
DIR = "/home/byk"
TOKEN = base64.b64encode(f"opencode:{PW}".encode()).decode()


@pytest.fixture
def server():
    with StandIn(Behaviour(PW)) as s:
        yield s


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_candidate_requests_all_carry_basic_auth(server):
    c = api.Client(server.port, password=PW, directory=DIR)
    c.health("/api/health")
    c.ui("/")
    c.await_activation()
    _, plugins = c.plugins()
    assert [p.name for p in plugins] == ["followup", "local-pty"] and all(p.active for p in plugins)
    assert server.b.seen and all(auth == "Basic " + TOKEN for _, _, auth in server.b.seen)
    api_paths = [path for _, path, _ in server.b.seen if path.startswith("/api/")]
    assert api_paths and all(path.endswith("?location%5Bdirectory%5D=%2Fhome%2Fbyk") for path in api_paths)
    assert PW not in repr(c) and TOKEN not in repr(c)


def test_production_requests_carry_no_auth_and_are_get_only():
    b = Behaviour(None)
    with StandIn(b) as s:
        c = api.Client(s.port)
        c.ui("/")
        with pytest.raises(ValueError, match="GET requests only"):
            c.await_activation()
        c.health("/api/health")  # legacy production: no v2 envelope, no location
    assert b.seen == [("GET", "/", None), ("GET", "/api/health", None)]
    with pytest.raises(ValueError, match="needs a location directory"):
        api.Client(4096, password=PW).health("/api/health")


def test_only_loopback_is_contacted():
    for host in ("10.0.0.1", "192.168.1.1", "example.com", "0.0.0.0"):
        with pytest.raises(ValueError):
            api.Client(4096, host=host)
    assert api.Client(4096, host="::1").base == "http://[::1]:4096"


def test_paths_are_plain():
    c = api.Client(4096)
    for bad in ("api/health", "/a b", "/x\r\nHost: evil", "http://x/"):
        with pytest.raises(ValueError):
            c.request("GET", bad, "x")


def test_empty_password_refused():
    with pytest.raises(ValueError):
        api.Client(4096, password="")


def test_connection_refused_reads_like_a_finding():
    port = _free_port()
    with pytest.raises(api.ApiError) as e:
        api.Client(port, password=PW, directory=DIR).health("/api/health")
    assert str(e.value).startswith(f"http://127.0.0.1:{port}/api/health: expected 200 with healthy=true, "
                                   "got connection refused after ")
    assert PW not in str(e.value)


def test_unhealthy_wrong_status_and_not_json(server):
    c = api.Client(server.port, password=PW, directory=DIR)
    server.b.healthy = False
    with pytest.raises(api.ApiError, match="status 200 and healthy=false"):
        c.health("/api/health")
    server.b.override["/h2"] = (200, b'["healthy"]', {})
    with pytest.raises(api.ApiError, match="JSON list, not an object"):
        c.health("/h2")
    server.b.override["/api/h5"] = (200, b'{"healthy": true}', {})  # upstream: bare
    c.health("/api/h5")
    server.b.override["/api/h6"] = (200, b'{"location": {}, "data": {"healthy": false}}', {})
    with pytest.raises(api.ApiError, match="healthy=false"):
        c.health("/api/h6")
    server.b.override["/h3"] = (200, b"<html>", {})
    with pytest.raises(api.ApiError, match="not JSON"):
        c.health("/h3")
    server.b.override["/h4"] = (200, b'{"healthy": "true"}', {})
    with pytest.raises(api.ApiError, match='healthy="true"'):
        c.health("/h4")
    with pytest.raises(api.ApiError, match="status 401"):
        api.Client(server.port, password="wrong", directory=DIR).health("/api/health")
    with pytest.raises(api.ApiError, match="status 404"):
        c.ui("/nope")


def test_empty_ui_body_fails(server):
    server.b.override["/empty"] = (200, b"", {})
    with pytest.raises(api.ApiError, match="an empty body"):
        api.Client(server.port, password=PW, directory=DIR).ui("/empty")


def test_body_bound_with_and_without_content_length(server):
    c = api.Client(server.port, password=PW, max_body=1000, directory=DIR)
    server.b.override["/big"] = (200, b"x" * 1001, {})
    with pytest.raises(api.ApiError, match="body that exceeds 1000 bytes"):
        c.ui("/big")
    server.b.override["/big2"] = (200, b"y" * 5000, {"X-No-Length": "1"})
    with pytest.raises(api.ApiError, match="body that exceeds 1000 bytes"):
        c.ui("/big2")
    server.b.override["/ok"] = (200, b"z" * 1000, {"X-No-Length": "1"})
    assert len(c.ui("/ok").body) == 1000


def test_trickling_server_hits_the_overall_deadline(server):
    server.b.trickle.add("/slow")
    c = api.Client(server.port, password=PW, read_timeout=1.0, directory=DIR)
    t = time.monotonic()
    with pytest.raises(api.ApiError, match="no complete answer within 1.0 s"):
        c.ui("/slow")
    assert time.monotonic() - t < 3


def test_hostile_body_is_excerpted_and_secrets_scrubbed(server):
    evil = (b"\x1b[2J\x00" + PW.encode() + b" " + TOKEN.encode() + b"\n" * 50 + b"A" * 5000)
    server.b.override["/echo"] = (500, evil, {})
    with pytest.raises(api.ApiError) as e:
        api.Client(server.port, password=PW, directory=DIR).ui("/echo")
    msg = str(e.value)
    assert PW not in msg and TOKEN not in msg and "<redacted>" in msg
    assert "\x1b" not in msg and "\n" not in msg and len(msg) < 400


def test_plugin_list_shape_is_checked(server):
    c = api.Client(server.port, password=PW, directory=DIR)
    server.b.plugins = {"followup": "active"}
    with pytest.raises(api.ApiError, match="data is a JSON dict"):
        c.plugins()
    for bad in ([{"name": "followup", "status": "active"}], [{"id": "followup"}],
                [{"id": "followup", "state": "active"}], [{"id": "followup", "state": {"status": 1}}]):
        server.b.plugins = bad
        with pytest.raises(api.ApiError, match="entry 0 is"):
            c.plugins()
    server.b.override["/api/plugin"] = (200, b'[{"id": "followup", "status": "active"}]', {})
    with pytest.raises(api.ApiError, match="not the envelope"):
        c.plugins()


def test_both_upstream_plugin_forms_are_read(server):
    c = api.Client(server.port, password=PW, directory=DIR)
    server.b.plugins = [{"id": "followup", "status": "active"},
                        {"id": "local-pty", "state": {"status": "failed", "error": "boom"}}]
    _, plugins = c.plugins()
    assert plugins == [api.Plugin("followup", "active"), api.Plugin("local-pty", "failed")]


def test_await_activation_answers_204_or_200(server):
    c = api.Client(server.port, password=PW, directory=DIR)
    assert c.await_activation().status == 204
    server.b.activation_status = 200
    assert c.await_activation().status == 200
    server.b.activation_status = 404
    with pytest.raises(api.ApiError, match=r"expected 204 \(or 200\), got status 404"):
        c.await_activation()


def test_pty_create_get_delete(server):
    c = api.Client(server.port, password=PW, directory=DIR)
    _, pty = c.pty_create("/bin/cat", [], "/tmp", "t")
    assert pty.id.startswith("pty_") and pty.status == "running" and pty.pid == 4242
    assert c.pty_get(pty.id)[1].id == pty.id
    assert c.pty_delete(pty.id).status == 204
    with pytest.raises(api.ApiError, match="status 404"):
        c.pty_get(pty.id)
    with pytest.raises(ValueError, match="not a PTY id"):
        c.pty_get("../../etc")


def test_pty_reply_shapes_are_checked(server):
    c = api.Client(server.port, password=PW, directory=DIR)
    for data, why in (({"id": "x/../y", "status": "running", "pid": 1}, "is not pty_<word>"),
                      ({"id": "pty_1", "status": "weird", "pid": 1}, "is not running or exited"),
                      ({"id": "pty_1", "status": "running", "pid": "1"}, "is not a process id")):
        server.b.override["/api/pty"] = (200, json.dumps({"location": {}, "data": data}).encode(), {})
        with pytest.raises(api.ApiError, match=why):
            c.pty_create("/bin/cat", [], "/tmp", "t")


def test_missing_or_inactive_names_each_plugin():
    seen = [api.Plugin("followup", "failed"), api.Plugin("other", "active"),
            api.Plugin("dup", "active"), api.Plugin("dup", "active")]
    assert api.missing_or_inactive(["followup", "local-pty", "other", "dup"], seen) == [
        "followup: status 'failed'", "local-pty: absent",
        "dup: listed 2 times (statuses [\"'active'\", \"'active'\"])"]


def test_await_activation_may_block(server):
    server.b.activation_delay = 1.5
    r = api.Client(server.port, password=PW, read_timeout=0.5, directory=DIR).await_activation(timeout=5)
    assert r.status == 204 and r.elapsed >= 1.5
