"""Issue 70 point 2: the Space runs without hf-encoderize and reads its records as JSON; the fields it reads are one
list (`space_compute.RECORD_FIELDS`), checked here against the records' dataclasses, so renaming a record field fails
this test instead of leaving the Space reading None."""

from __future__ import annotations

import ast
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from hf_encoderize.records import contrastive_record, encoder_facts, run_record

SPACE = Path(__file__).resolve().parents[1] / "space"
CLASSES = {"EncoderFacts": encoder_facts.EncoderFacts, "RunRecord": run_record.RunRecord,
           "ContrastiveStage": contrastive_record.ContrastiveStage,
           "ContrastiveRecord": contrastive_record.ContrastiveRecord,
           "ContrastiveSource": contrastive_record.ContrastiveSource}


@pytest.fixture(scope="module")
def space_compute():
    sys.path.insert(0, str(SPACE))
    try:
        import space_compute

        yield space_compute
    finally:
        sys.path.remove(str(SPACE))


def test_every_record_field_the_space_reads_is_a_field_of_that_record(space_compute):
    assert set(space_compute.RECORD_FIELDS) == set(CLASSES)
    for kind, names in space_compute.RECORD_FIELDS.items():
        declared = {f.name for f in fields(CLASSES[kind])}
        assert set(names) <= declared, f"{kind} has no field {sorted(set(names) - declared)}: the Space reads it"
    for (kind, name), former in space_compute.FORMER_NAMES.items():
        assert name in space_compute.RECORD_FIELDS[kind] and former not in {f.name for f in fields(CLASSES[kind])}
        lifted = CLASSES[kind].from_dict({former: "x"})  # the package reads the old name as the new one too
        assert getattr(lifted, name) == "x"


def _raw_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """`x.get("key")` and `x["key"]` whose key is a field of one of the records, outside `recorded` and outside the
    Space's own space_config.json (`stored`, written by push-space)."""
    record_fields = {f.name for cls in CLASSES.values() for f in fields(cls)} - {"facts"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target, key = node.func.value, node.args[0] if node.args else None
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):  # `kwargs["revision"] = ...` writes
            target, key = node.value, node.slice
        else:
            continue
        if (isinstance(key, ast.Constant) and key.value in record_fields
                and not (isinstance(target, ast.Name) and target.id == "stored")):
            found.append((node.lineno, key.value))
    return found


def test_the_space_reads_record_fields_only_through_the_checked_list(space_compute):
    for path in sorted(SPACE.glob("*.py")):
        tree = ast.parse(path.read_text())
        assert _raw_reads(tree) == [], f"{path.name} reads a record field by key; use space_compute.recorded"
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "recorded":
                kind, name = (arg.value for arg in node.args[1:3])  # literals, so this test sees every read
                assert name in space_compute.RECORD_FIELDS[kind], f"{path.name}:{node.lineno} reads {kind}.{name}"


def test_a_stage_recorded_before_the_method_was_named_still_names_it_on_screen(space_compute):
    assert space_compute.recorded({"objective": "simcse"}, "ContrastiveStage", "method") == "simcse"
    assert space_compute.recorded({"method": "distill", "objective": "x"}, "ContrastiveStage", "method") == "distill"
    assert space_compute.recorded("not a record", "RunRecord", "base_model") is None
    with pytest.raises(KeyError, match="RECORD_FIELDS"):
        space_compute.recorded({}, "RunRecord", "steps")
