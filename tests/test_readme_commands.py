"""Every command README and docs/ show is run by a test (issue 32 item 7: `pty-acceptance
bench` crashed before it measured anything, and no test ran it). RUN_BY maps
each command of their code blocks to the tests that run it (a fast form
where the full run is long); a command they gain without a test fails
here, and so does a test named here that does not exist. The commands no
other module runs are run here (`node-ids --write`)."""

import re
import shutil
import subprocess
import sys

from conftest import REPO

# a command line of a code block of README or a docs/ page (indented four spaces)
PAGES = ("README.md", "docs/*.md")
COMMAND = re.compile(r"^    (?:sh tools/|\.venv/bin/|pty-acceptance |ansible-playbook |pipx )")

# run by no test, and why
NOT_RUN: dict[str, str] = {
    "sh tools/setup.sh": "the lab's own setup: apt changes the lab machine, and every test here runs in "
                         "the .venv it made",
}
RUN_BY: dict[str, tuple[str, ...]] = {
    "pty-acceptance reference": (
        "tests/test_reference_host.py::test_good_reference_host_passes_every_module_that_exists",),
    "pty-acceptance reference --supervisor python": (
        "tests/test_reference_host.py::test_good_reference_host_passes_every_module_that_exists",
        "tests/test_mutants.py::test_the_cli_offers_the_supervisor_implementations_and_releases_the_harness_deploys"),
    "pty-acceptance reference --release trixie [--supervisor python]": (
        "tests/test_reference_host.py::test_good_reference_host_passes_every_module_that_exists",
        "tests/test_mutants.py::test_the_cli_offers_the_supervisor_implementations_and_releases_the_harness_deploys"),
    # trixie's full matrix is an hour: CI runs the release's good host (above), the refusal a release
    # makes of a fault, and the command line that takes --release
    "pty-acceptance mutants --release trixie [--only FAULT-ID]...": (
        "tests/test_mutants.py::test_a_fault_a_release_refuses_is_a_proven_fact_not_a_kill",
        "tests/test_mutants.py::test_the_cli_offers_the_supervisor_implementations_and_releases_the_harness_deploys"),
    "pytest tests/": ("tests/test_readme_commands.py::test_every_readme_command_is_run_by_a_test",),
    "sh tools/setup-target.sh": (
        "tests/test_setup_target.py::test_the_online_install_makes_a_venv_that_runs_the_command_line",
        "tests/test_setup_target.py::test_an_older_python_is_refused_first_in_one_line_and_nothing_is_made"),
    "sh tools/wheelhouse.sh /tmp/wheelhouse 3.11": (
        "tests/test_target_install.py::test_the_offline_target_install_runs_the_suite_ready",),
    "sh tools/setup-target.sh --wheelhouse /path/to/wheelhouse": (
        "tests/test_target_install.py::test_the_offline_target_install_runs_the_suite_ready",
        "tests/test_fleet.py::test_fleet_two_reference_hosts"),
    "pty-acceptance preflight [--inventory FILE]": (
        "tests/test_preflight.py::test_the_command_prints_each_check_and_the_first_cause",),
    "pty-acceptance inventory check [--inventory FILE]": (
        "tests/test_invcheck.py::test_the_command_exits_non_zero_unless_every_fact_matches",),
    "pytest acceptance/": ("tests/test_suite_here.py::test_shipped_target_inventory_stops_the_run_naming_runtime_1",),
    "pytest acceptance/ --inventory FILE": (
        "tests/test_target_install.py::test_the_offline_target_install_runs_the_suite_ready",),
    "ansible-playbook -i HOSTS.yml fleet/pty-acceptance.yml": ("tests/test_fleet.py::test_fleet_two_reference_hosts",),
    "pytest acceptance/ --sign-key /etc/opencode/keys/statement.pem": (
        "tests/test_signing.py::test_a_ready_run_writes_a_signed_statement_that_verifies",),
    "pytest acceptance/ --sign-key /etc/opencode/keys/statement_ed25519 --sign-tool ssh-keygen": (
        "tests/test_signing.py::test_a_ready_run_writes_a_signed_statement_that_verifies",),
    "pytest acceptance/ --sign-key /etc/opencode/keys/statement.gpg --sign-tool gpg": (
        "tests/test_signing.py::test_a_ready_run_writes_a_signed_statement_that_verifies",),
    "pty-acceptance verify-statement reports/acceptance-<host>-<time>.intoto.dsse.json --pubkey statement.pub.pem": (
        "tests/test_signing.py::test_a_ready_run_writes_a_signed_statement_that_verifies",),
    "pty-acceptance verify-statement ENVELOPE --pubkey statement_ed25519.pub --sign-tool ssh-keygen": (
        "tests/test_signing.py::test_a_ready_run_writes_a_signed_statement_that_verifies",),
    "pty-acceptance verify-statement ENVELOPE --pubkey statement.pub.asc --sign-tool gpg": (
        "tests/test_signing.py::test_gpg_round_trip_through_the_report_command",),
    "pty-acceptance report reports/acceptance-<host>-<time>.xml --out-dir DIR": (
        "tests/test_verdict.py::test_report_makes_an_out_dir_that_does_not_exist_and_says_in_one_line_where_it_cannot",),
    "pty-acceptance verify-marker [--marker PATH] [--root DIR] [--inventory FILE]": (
        "tests/test_verifier.py::test_installed_command_line_tool",
        "tests/test_reference_host.py::test_good_reference_host_passes_every_module_that_exists"),
    "pty-acceptance source-manifest --pilot-root DIR --code-root DIR [--list]": (
        "tests/test_manifest.py::test_command_line",),
    "pty-acceptance reference [--supervisor go|python] [--before-suite SCRIPT]... [--after-suite SCRIPT]...": (
        "tests/test_reference_host.py::test_good_reference_host_passes_every_module_that_exists",
        "tests/test_mutants.py::test_ci_subset_is_killed_and_the_control_passes"),
    "pty-acceptance mutants [--supervisor go|python] [--only ID]... [--jobs N]": (
        "tests/test_mutants.py::test_ci_subset_is_killed_and_the_control_passes",
        "tests/test_mutants.py::test_the_cli_offers_the_supervisor_implementations_and_releases_the_harness_deploys"),
    "pty-acceptance report FILE.xml [--checklist ROOT-ACCEPTANCE.md] [--out-dir DIR]": (
        "tests/test_verdict.py::test_report_makes_an_out_dir_that_does_not_exist_and_says_in_one_line_where_it_cannot",
        "tests/test_install.py::test_report_renders_with_the_checklist_the_package_carries"),
    "pty-acceptance bench [--runs N] [--warmup N] [--repeats N] [--rev REV] [--what-if WORD]": (
        "tests/test_bench_probe.py::test_the_bench_command_runs_every_floor_probe",),
    "pty-acceptance fleet-summary DIR --run-id ID [--pubkey HOST=FILE [--sign-tool HOST=TOOL]]... HOST...": (
        "tests/test_fleet_summary.py::test_each_hosts_envelope_is_verified_with_its_own_key",
        "tests/test_fleet.py::test_fleet_two_reference_hosts"),
    "pty-acceptance node-ids [--write]": ("tests/test_readme_commands.py::test_node_ids_write_then_check",),
    "pty-acceptance suite-identity [--root DIR] [--list]": (
        "tests/test_verdict.py::test_a_ready_bundle_names_the_suite_that_judged",),
    "pty-acceptance --version": ("tests/test_install.py::test_version",),
    # pipx makes a venv of its own and pip-installs the package into it: test_install does exactly that
    "pipx install .": ("tests/test_install.py::test_the_commands_that_need_nothing_else",),
    "pty-acceptance mutants --jobs 2": ("tests/test_mutants.py::test_ci_subset_is_killed_and_the_control_passes",),
    # the full bench is half an hour: its probe path in minutes (the suite runs are reference's)
    "pty-acceptance bench [--runs 3] [--warmup 1] [--rev REV]": (
        "tests/test_bench_probe.py::test_the_bench_command_runs_every_floor_probe",),
    "pty-acceptance bench --runs 0 --warmup 0 --repeats 1": (
        "tests/test_bench_probe.py::test_the_bench_command_runs_every_floor_probe",),
    "pty-acceptance node-ids --write": ("tests/test_readme_commands.py::test_node_ids_write_then_check",),
    "pty-acceptance checklist --write": ("tests/test_readme_commands.py::test_checklist_write_then_check",),
    "pty-acceptance checklist": ("tests/test_readme_commands.py::test_checklist_write_then_check",
                                 "tests/test_linters.py::test_the_checklist_is_the_rendering_of_the_requirement_records"),
    "pty-acceptance node-ids": ("tests/test_readme_commands.py::test_node_ids_write_then_check",
                                "tests/test_linters.py::test_the_node_id_list_matches_the_checkout"),
}


def pages() -> list:
    """README.md and every page under docs/, README first."""
    return [path for pattern in PAGES for path in sorted(REPO.glob(pattern))]


def readme_commands() -> list[str]:
    """Each command of the code blocks of README and docs/, without `.venv/bin/`
    and its comment; `a && b` is two commands."""
    out = []
    for line in (line for page in pages() for line in page.read_text().splitlines()):
        if COMMAND.match(line):
            text = line.split("  #", 1)[0].strip().replace(".venv/bin/", "")
            out += [part.strip() for part in text.split("&&")]
    return list(dict.fromkeys(out))


def test_every_readme_command_is_run_by_a_test():
    commands = readme_commands()
    assert len(commands) > 30 and "pty-acceptance bench [--runs 3] [--warmup 1] [--rev REV]" in commands
    assert not set(RUN_BY) - set(commands), f"no longer in README or docs/: {sorted(set(RUN_BY) - set(commands))}"
    missing = [c for c in commands if not RUN_BY.get(c) and c not in NOT_RUN]
    assert not missing, f"README or docs/ commands no test runs (name the test in RUN_BY, or write it): {missing}"
    for command in commands:
        for node in RUN_BY.get(command, ()):
            path, name = node.split("::")
            assert re.search(rf"^def {re.escape(name)}\(", (REPO / path).read_text(), re.M), \
                f"{command}: {node} does not exist"


# README's own two commands, verbatim (the quick start; .ci/run runs the second)
QUICK_START = ("    sh tools/setup.sh && .venv/bin/pty-acceptance reference",
               "    sh tools/setup.sh && .venv/bin/pytest tests/")


def test_readme_keeps_the_quick_start_and_links_every_docs_page():
    readme = (REPO / "README.md").read_text()
    assert all(line in readme.splitlines() for line in QUICK_START), QUICK_START
    unlinked = [page.name for page in pages()[1:] if f"](docs/{page.name})" not in readme]
    assert pages()[1:] and not unlinked, f"docs/ pages README does not link: {unlinked}"


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_between_the_pages_leads_somewhere():
    """A link of README or a docs/ page to a file of the checkout names one that
    exists, and its #anchor one of that page's headings."""
    broken = []
    for page in pages():
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"\w+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.is_file():
                broken.append(f"{page.name}: {target}")
            elif anchor and anchor not in {_anchor(h) for h in re.findall(r"^#+ (.*)$", linked.read_text(), re.M)}:
                broken.append(f"{page.name}: {target}")
    assert not broken, broken


# the command line run against a copy of the checkout (its PROJECT), as `pty-acceptance ARGS` runs in one
_CLI_ON_COPY = ("import sys; from pathlib import Path; from pty_acceptance import cli; "
                "cli.PROJECT = Path(sys.argv[1]); sys.exit(cli.main(sys.argv[2:]))")


def _cli_on(copy, *args, timeout):
    return subprocess.run([sys.executable, "-c", _CLI_ON_COPY, str(copy), *args], cwd=copy,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_node_ids_write_then_check(tmp_path):
    """docs/layout.md, "Adding a site check": `node-ids --write` writes the checkout's
    list anew, then `node-ids` exits 0; here on a copy of the checkout, so the
    checkout's own list is judged by test_linters alone."""
    copy = tmp_path / "checkout"
    for rel in ("acceptance", "pyproject.toml", "conftest.py", "ROOT-ACCEPTANCE.md", "inventories"):
        (shutil.copytree if (REPO / rel).is_dir() else shutil.copyfile)(REPO / rel, copy / rel)
    (copy / "acceptance/node-ids.txt").write_text("")
    wrote = _cli_on(copy, "node-ids", "--write", timeout=300)
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    assert wrote.stdout.startswith("node-ids: ") and " tests written to " in wrote.stdout
    assert (copy / "acceptance/node-ids.txt").read_text() == (REPO / "acceptance/node-ids.txt").read_text()
    checked = _cli_on(copy, "node-ids", timeout=300)
    assert checked.returncode == 0 and checked.stdout.rstrip().endswith("the list matches"), checked.stdout


def test_checklist_write_then_check(tmp_path):
    """docs/layout.md, "Adding a requirement": ROOT-ACCEPTANCE.md's table and
    requirement bullets are rendered from the records; with them emptied on a
    copy of the checkout, `checklist` exits 1 naming the fix, `checklist
    --write` makes them anew, identical to the checkout's, then `checklist` exits 0."""
    copy = tmp_path / "checkout"
    (copy / "acceptance").mkdir(parents=True)
    shutil.copyfile(REPO / "acceptance/node-ids.txt", copy / "acceptance/node-ids.txt")
    text = (REPO / "ROOT-ACCEPTANCE.md").read_text()
    emptied = re.sub(r"(^<!-- BEGIN (.+?) -->\n).*?(^<!-- END \2 -->\n)", r"\1\3", text, flags=re.M | re.S)
    assert emptied.count("<!-- BEGIN ") >= 20 and "- **OWN-1**" not in emptied
    (copy / "ROOT-ACCEPTANCE.md").write_text(emptied)

    def checklist(*args):
        return _cli_on(copy, "checklist", *args, timeout=120)

    stale = checklist()
    assert stale.returncode == 1 and "run pty-acceptance checklist --write" in stale.stdout, stale.stdout
    wrote = checklist("--write")
    assert wrote.returncode == 0 and " rendered from " in wrote.stdout, wrote.stdout + wrote.stderr
    assert (copy / "ROOT-ACCEPTANCE.md").read_text() == text
    checked = checklist()
    assert checked.returncode == 0 and "is the rendering of" in checked.stdout, checked.stdout
