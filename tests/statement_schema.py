"""The in-toto test-result v0.1 predicate's JSON schema, written from its
specification (tests/schemas/in-toto-test-result-v0.1.schema.json), and the
check of a Statement against it (test_intoto.py, test_verdict.py)."""

import json

import jsonschema

from conftest import REPO

SCHEMA = json.loads((REPO / "tests/schemas/in-toto-test-result-v0.1.schema.json").read_text())


def validate(statement: dict) -> None:
    jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(statement)
