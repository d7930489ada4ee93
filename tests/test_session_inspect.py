"""UNIT-6's judgement of a session command's environment (session_inspect.environment_problems)."""

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

