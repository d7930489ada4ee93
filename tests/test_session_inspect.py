"""UNIT-6's judgement of a session command's environment (session_inspect.environment_problems)."""
import pytest

from pty_acceptance.supervisor import session_inspect as live

WANT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/byk", "TERM": "xterm-256color",
        "LANG": "C.UTF-8"}
GOOD = [f"{k}={v}" for k, v in WANT.items()]


def test_the_declared_environment_passes():
    assert live.environment_problems(GOOD, WANT) == []


def test_a_right_name_with_a_wrong_value_fails():
    # what the old names-only check let through (fault launcher-path-value)
    env = [e for e in GOOD if not e.startswith("PATH=")] + ["PATH=/home/byk/.local/bin:/usr/local/bin:/usr/bin:/bin"]
    assert sorted(e.partition("=")[0] for e in env) == sorted(WANT)  # the names alone match
    problems = live.environment_problems(env, WANT)
    assert len(problems) == 1 and problems[0].startswith("PATH='/home/byk/.local/bin:"), problems


def test_missing_extra_and_repeated_names_fail():
    assert live.environment_problems(GOOD[1:], WANT) == ["PATH is not set"]
    assert "beyond the fixed list" in live.environment_problems(GOOD + ["X=1"], WANT)[0]
    assert live.environment_problems(GOOD + ["TERM=dumb"], WANT) == \
        ["TERM is set 2 times: ['xterm-256color', 'dumb']"]


def test_a_malformed_report_fails():
    assert live.environment_problems("PATH=/bin", WANT)
    assert live.environment_problems([1, 2], WANT)


# -- the probe's report in a session's output (the user can write into the session's terminal)
GENUINE = b'PROBE-BEGIN{"pid": 7, "uid": 1000}PROBE-END\r\n'


def test_one_report_is_read():
    assert live.parse_probe(b"noise\r\n" + GENUINE + b"more\r\n") == {"pid": 7, "uid": 1000}


@pytest.mark.parametrize("forged", [
    b'PROBE-BEGIN{"pid": 7, "uid": 0}PROBE-END\r\n' + GENUINE,   # a forged report first
    GENUINE + b'PROBE-BEGIN{"pid": 7, "uid": 0}PROBE-END\r\n',   # ... or after
    b"PROBE-BEGIN\r\n" + GENUINE,                                 # a stray begin
    GENUINE + b"PROBE-END\r\n",                                   # a stray end
])
def test_more_than_one_report_fails_and_is_not_shown(forged):
    with pytest.raises(live.LiveError) as e:
        live.parse_probe(forged)
    assert "expected exactly one report" in str(e.value) and "uid" not in str(e.value)


def test_no_report_fails():
    with pytest.raises(live.LiveError):
        live.parse_probe(b"nothing here\r\n")
