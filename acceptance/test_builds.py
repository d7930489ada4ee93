"""Builds and scope: the installed artifacts are exactly what the reviewed
source builds to.

BUILD-1 two builds as an unprivileged user, each in its own private temporary
        directory, with `CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build
        -trimpath -ldflags=-buildid=`, are byte-identical.
BUILD-2 source revision, Go version, go.sum, the commands and every SHA-256
        are recorded as evidence, with the build user's ids and go's package
        (Testinfra's host.user and host.package).
BUILD-3 the installed binaries equal the reproduced builds.
SCOPE-1 the source manifest recomputed (review-source-hash) equals the claim:
        each file read once, by descriptor, and copied as it is hashed into a
        root-owned mirror (provenance/source_copy.py), the very bytes
        PLUGIN-1's harness runs see where the trees are.
SCOPE-3 the candidate checkout's HEAD, as git itself resolves it, is the claimed
        revision (a repository layout git could resolve otherwise is refused).
"""

import hashlib

import pytest

from pty_acceptance.host import hostfs
from pty_acceptance.provenance import gitrev
from pty_acceptance.spec.inventory import ARTIFACTS
from pty_acceptance.gate.checks import expect, finding, reading
from pty_acceptance.gate.failures import fail


@pytest.fixture(scope="module")
def reproduction(reproduced):
    made, why = reproduced
    if made is None:
        fail(f"BUILD-1: the reproducible builds could not be made: {why}")
    return made


@pytest.mark.requirement("BUILD-1")
@pytest.mark.parametrize("role", ARTIFACTS)
def test_two_builds_are_byte_identical(reproduction, role, evidence):
    a, b = reproduction.sets
    evidence("build a", f"{a.sha256(role)} ({len(a.artifacts[role])} bytes) in {a.directory}")
    evidence("build b", f"{b.sha256(role)} ({len(b.artifacts[role])} bytes) in {b.directory}")
    off = hostfs.first_difference(a.artifacts[role], b.artifacts[role])
    expect(off is None, "BUILD-1", f"the {role} builds differ: {a.sha256(role)} vs "
                                   f"{b.sha256(role)}, first differing byte at offset {off}")


@pytest.mark.requirement("BUILD-2")
def test_build_evidence_is_recorded(inv, reproduction, host, evidence, packaged):
    evidence("build user", reproduction.user)
    builder = host.user(reproduction.user)
    evidence("build user (id)", f"uid {builder.uid} gid {builder.gid} groups {builder.groups}"
             if builder.exists else "no such user now")
    evidence("go version", reproduction.go_version)
    packaged(inv.build.go)
    evidence("go.sum sha256", reproduction.go_sum_sha256)
    for s in reproduction.sets:
        for cmd in s.commands:
            evidence(f"command {s.label}", cmd)
        for role in ARTIFACTS:
            evidence(f"sha256 {s.label}", f"{s.sha256(role)}  {role}")
    expect(reproduction.go_version.startswith("go version go"), "BUILD-2",
           f"unexpected go version output {reproduction.go_version!r}")
    want = inv.build.go_version
    if want:
        got = reproduction.go_version.split()[2]
        expect(got == want, "BUILD-2", f"the host builds with {got}, the review used {want}")
    expect(all(len(s.commands) == len(ARTIFACTS) for s in reproduction.sets), "BUILD-2",
           "a build set is missing a command")


@pytest.mark.requirement("BUILD-3")
@pytest.mark.parametrize("role", ARTIFACTS)
def test_installed_binary_equals_the_reproduced_build(inv, reproduction, role, evidence):
    b = {x.role: x for x in inv.binaries_list}[role]
    built = reproduction.sets[0].artifacts[role]
    with reading("BUILD-3", f"cannot read {b.path}", OSError):  # not host.file: Testinfra follows links
        installed = hostfs.read_file(b.path, inv.limit("artifact_bytes"))
    evidence("installed", f"{hashlib.sha256(installed).hexdigest()}  {b.path}")
    evidence("reproduced", f"{hashlib.sha256(built).hexdigest()}  {role}")
    off = hostfs.first_difference(installed, built)
    expect(off is None, "BUILD-3", f"{b.path} ({len(installed)} bytes) differs from the "
                                   f"reproduced {role} ({len(built)} bytes) from byte {off}")


@pytest.mark.requirement("SCOPE-1")
def test_source_manifest_is_the_claimed_manifest(inv, source, evidence):
    made, why = source
    if made is None:
        raise finding("SCOPE-1", f"the source manifest cannot be computed: {why}")
    evidence("listing", made.listing)
    evidence("manifest", made.digest)
    evidence("read", f"each file once, copied as it was hashed into {made.top} (root's; what PLUGIN-1's "
                     "runs see)")
    expect(made.digest == inv.source_manifest_sha256, "SCOPE-1",
           f"the source manifest is {made.digest}, the claim is {inv.source_manifest_sha256}")


@pytest.mark.requirement("SCOPE-3")
def test_candidate_revision_is_the_claimed_revision(inv, evidence):
    with reading("SCOPE-3", "cannot read the candidate's revision", gitrev.GitError):
        head = gitrev.head(inv.code_root)
    evidence("HEAD", f"{head} of {inv.code_root}")
    expect(head == inv.revision, "SCOPE-3", f"{inv.code_root} is at {head}, the claim is {inv.revision}")
