"""One source of card facts (issue 40): `card`, `export` and `push` all render from the run folder's records, so
no command renders a card with less than the last one knew; `export` only adds its "Serve it" rows."""

import json

import pytest
import yaml

pytest.importorskip("onnxruntime")

from hf_encoderize.cli import main  # noqa: E402
from hf_encoderize.publish.hub import encoder_upload  # noqa: E402

TINY = ["--max-seq-length", "32", "--batch-size", "4", "--eval-documents", "8", "--save-steps", "2", "--no-progress",
        "--logging-steps", "100"]


def facts(card: str) -> dict:
    """What a card states about training and evaluation: its metadata (model-index included) and every table row
    outside "Serve it" and the usage snippets (those name the model's location, which a push changes)."""
    meta = yaml.safe_load(card.split("---\n")[1])
    meta.pop("model_name", None)
    for entry in meta.pop("model-index", []):
        meta["results"] = entry["results"]
    body = card.split("---\n", 2)[2].split("## Serve it")[0]
    rows = [line for line in body.splitlines() if line.startswith("| ") and "`hf-encoderize export" not in line]
    return {"meta": meta, "rows": rows}


def test_cpt_eval_card_export_push_keep_every_fact(decoder_dir, tmp_path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"text": " ".join(f"w{(7 * d + i) % 120}" for i in range(6 + d % 20))})
                              + "\n" for d in range(120)))
    out, results = tmp_path / "run", tmp_path / "results"
    assert main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-steps", "2", "--output-dir", str(out),
                 *TINY]) == 0
    assert main(["eval", str(out / "encoder"), "--profile", "smoke", "--datasets", "syn-sentiment", "--max-steps",
                 "2", "--output-dir", str(results)]) == 0
    summary = json.loads((results / "run" / "summary.json").read_text())
    assert main(["card", str(out), "--results-dir", str(results / "run"), "--license", "mit", "--model-id",
                 "someone/run"]) == 0
    readme = out / "encoder" / "README.md"
    carded = readme.read_text()
    record = json.loads((out / "run_record.json").read_text())
    before = facts(carded)
    # The card knows the training run and the scores (the facts the later commands must keep).
    assert f"{record['steps']} optimizer steps" in carded and "Not evaluated yet" not in carded
    row = summary["results"][0]  # a smoke score: a row of the body, not of model-index (issue 66 point 2)
    assert f"| {row['dataset']} | {row['metric']} | {row['test_mean']:.2f} |" in "\n".join(before["rows"])
    assert before["meta"]["license"] == "mit"

    assert main(["export", str(out), "--format", "onnx"]) == 0
    exported = readme.read_text()
    assert facts(exported) == before  # nothing lost, nothing changed
    assert "`onnx/model.onnx` | verified" in exported.split("## Serve it")[1]  # its own rows added
    removed = set(carded.splitlines()) - set(exported.splitlines())
    assert removed <= set(carded.split("## Serve it")[1].splitlines())  # only "Serve it" changes ("no export yet")

    # The card named the model by the repo it is pushed to (--model-id): the tables' column header is the repo id.
    assert main(["push", str(out / "encoder"), "someone/run", "--dry-run"]) == 0
    pushed = encoder_upload(out / "encoder", "someone/run")[1]["README.md"].decode()
    assert facts(pushed) == before  # the encoder folder alone names the same run: the same facts
    assert "`onnx/model.onnx` | verified" in pushed and "plots/loss_curve.png" in pushed
