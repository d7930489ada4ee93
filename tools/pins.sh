#!/bin/sh
# Print requirements/target.txt anew: the versions it pins now, each with the
# SHA-256 of every wheel a target may take (CPython 3.11-3.13, x86_64), read
# from what the registry serves. To move a pin: edit its version in
# requirements/target.txt, run `sh tools/pins.sh > requirements/target.txt.new`,
# review the diff, move it into place.
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed -n 's/^\([A-Za-z0-9_.-]*==[^ ]*\).*/\1/p' requirements/target.txt > "$work/pins"
for version in 3.11 3.12 3.13; do
    "$PY" -m pip --disable-pip-version-check --no-input -q download --no-deps --dest "$work/w" \
        --only-binary=:all: --implementation cp --python-version "$version" \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 -r "$work/pins" </dev/null
done
sed -n '/^[#]/p;/^$/{p;q}' requirements/target.txt
"$PY" - "$work/w" <<'PY'
import hashlib, pathlib, sys
found = {}
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    name, version = f.name.split("-")[:2]
    key = (name.lower().replace("_", "-"), version)
    found.setdefault(key, set()).add(hashlib.sha256(f.read_bytes()).hexdigest())
for (name, version), hashes in found.items():
    lines = [f"{name}=={version}"] + [f"    --hash=sha256:{h}" for h in sorted(hashes)]
    print(" \\\n".join(lines))
PY
