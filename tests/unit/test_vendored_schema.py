"""docker/compose-spec.json: the Compose Specification's JSON Schema, vendored so that the compose files are
validated on every clone (tests/test_docker_compose*.py). It stays the copy docker/README.md names."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

REPO = Path(__file__).resolve().parents[2]
VENDORED = REPO / "docker" / "compose-spec.json"
SHARED = REPO.parent / "shared" / "schemas" / "compose-spec.json"  # where this copy came from, on the dev machine


def test_the_vendored_schema_is_the_compose_specification():
    schema = json.loads(VENDORED.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["title"] == "Compose Specification" and "services" in schema["properties"]
    readme = (REPO / "docker" / "README.md").read_text(encoding="utf-8")
    assert "compose-spec.json" in readme and "Apache" in readme  # its source and licence are stated


def test_the_vendored_schema_matches_the_shared_copy():
    if not SHARED.is_file():
        pytest.skip(f"no {SHARED} beside this clone to compare with")
    assert VENDORED.read_bytes() == SHARED.read_bytes(), f"{VENDORED} differs from {SHARED}: copy it again"
