"""audit.json against the schema shipped in the package (bnmem/schemas/audit.schema.json), and exposure.csv's header."""

from __future__ import annotations

import copy
import csv
import json

import pytest

jsonschema = pytest.importorskip("jsonschema")

import bnmem  # noqa: E402
from bnmem.config import DataConfig, ModelConfig  # noqa: E402
from bnmem.schemas import AUDIT_SCHEMA_VERSION, load_schema  # noqa: E402


def validate(doc: dict) -> None:
    jsonschema.Draft202012Validator(load_schema()).validate(doc)


@pytest.fixture(scope="module")
def audits(tmp_path_factory):
    """A digits model audited with 4 shadow copies and a gate, and without copies (membership null)."""
    from bnmem.data import load_dataset
    from bnmem.train import seeded_model

    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.05, train_size=120, seed=0))
    model = seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0).eval()
    out = tmp_path_factory.mktemp("schema")
    with_copies = bnmem.audit(model, ds, shadow_models=4, train={"epochs": 1}, max_examples=40, top_k=5,
                              fail_at="moderate", canaries=100, out=out / "copies")
    without = bnmem.audit(model, ds, max_examples=40, top_k=5, out=out / "plain")
    return with_copies, without


def test_schema_is_valid_and_versioned():
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema_version"] == {"const": AUDIT_SCHEMA_VERSION}


def test_audit_json_validates_with_and_without_shadow_copies(audits):
    for result in audits:
        doc = json.loads((result.out / "audit.json").read_text())
        assert doc["schema_version"] == AUDIT_SCHEMA_VERSION
        validate(doc)
    assert json.loads((audits[0].out / "audit.json").read_text())["risk"]["gate"]["budget"] == "moderate"
    assert json.loads((audits[1].out / "audit.json").read_text())["membership"] is None


def test_the_one_run_audit_is_in_the_result_and_the_report(audits):
    """--canaries: the floor beside the multi-run ε lower bound, in audit.json and audit.md."""
    doc = json.loads((audits[0].out / "audit.json").read_text())
    one, multi = doc["one_run"], doc["risk"]["epsilon"]
    want = multi and {**{k: multi[k] for k in ("eps_lb", "attack", "group")}, "where": one["multi_run"]["where"]}
    assert one["canaries"] == 100 and one["multi_run"] == want
    assert one["eps_lb"] == max(p["eps_lb"] for p in one["per_k"]) and one["grid"] == [5, 10, 20, 50]
    md = (audits[0].out / "audit.md").read_text()
    assert "## One-run audit of the recipe (inserted canaries)" in md and one["text"] in md
    assert ("not an estimate" in one["text"]) == (one["eps_lb"] > 0)
    assert ("multi-run ε lower bound over the shadow copies" in one["text"]) == (multi is not None)
    assert "one_run" not in json.loads((audits[1].out / "audit.json").read_text())


def test_exposure_csv_header_is_the_schemas(audits):
    header = next(csv.reader((audits[0].out / "exposure.csv").open()))
    columns = load_schema()["$defs"]["exposure_columns"]
    jsonschema.Draft202012Validator(columns).validate(header)
    assert header == json.loads((audits[0].out / "audit.json").read_text())["membership"]["exposure"]["columns"]
    assert not (audits[1].out / "exposure.csv").exists()


@pytest.mark.parametrize("breaks", ["version", "level", "group_ci", "exposure_row", "gate_code", "required"])
def test_the_schema_rejects_what_would_break_a_reader(audits, breaks):
    doc = copy.deepcopy(json.loads((audits[0].out / "audit.json").read_text()))
    validate(doc)
    if breaks == "version":
        doc["schema_version"] = "0.9"
    elif breaks == "level":
        doc["risk"]["level"] = "high"
    elif breaks == "group_ci":
        next(iter(doc["membership"]["leakage"]["rmia"].values()))["ci"]["auc"] = [0.5]
    elif breaks == "exposure_row":
        doc["membership"]["exposure"]["top"][0]["group"] = "mislabeled"
    elif breaks == "gate_code":
        doc["risk"]["gate"]["exit_code"] = 1
    else:
        del doc["risk"]["groups"]
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)
