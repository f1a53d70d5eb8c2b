"""The model card: metadata the Hub understands, every metric equal to summary.json, snippets that run as written."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hub_server import make_run_folder, summary

from hf_encoderize.cli import main
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.publish.card import CARD_MARKER, CardConfig, gather_facts, render_card, write_card


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("card")
    (root / "base").mkdir()
    (root / "base" / "README.md").write_text("---\nlicense: mit\nlanguage:\n- en\n---\n# The base model\n")
    out = make_run_folder(root)
    write_card(CardConfig(str(out)))
    return out


def front_matter(readme: Path) -> dict:
    text = readme.read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def test_front_matter_has_hub_metadata(run_dir):
    meta = front_matter(run_dir / "encoder" / "README.md")
    assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == "feature-extraction"
    assert meta["license"] == "mit" and meta["language"] == ["en"]  # inherited from the base model's card
    assert {"hf-encoderize", "fill-mask", "llama", "arxiv:2507.00994"} <= set(meta["tags"])
    assert meta["datasets"] == ["HuggingFaceFW/fineweb-edu"]
    assert "base_model" not in meta  # a local folder is not a Hub id: left out rather than invented


def test_model_index_equals_summary(run_dir):
    from huggingface_hub import ModelCard

    card = ModelCard.load(run_dir / "encoder" / "README.md")
    expected = {}
    for row in json.loads((run_dir / "eval" / "encoder" / "summary.json").read_text())["results"]:
        expected[(row["dataset"], row["metric"])] = row["test_mean"]
        expected.update({(row["dataset"], name): value for name, value in row["extra_metrics"].items()})
    found = {(r.dataset_name, r.metric_type): r.metric_value for r in card.data.eval_results}
    assert found == expected  # exact floats: one EvalResult per dataset and metric, nothing rounded
    from hf_encoderize.evaluation.loaders import dataset_spec

    # Named as the Hub names datasets: id, config and the split scored (issue 66 point 2)
    assert {(r.dataset_name, r.dataset_type, r.dataset_config, r.dataset_split) for r in card.data.eval_results} == {
        (name, dataset_spec(name).hub, dataset_spec(name).config, dataset_spec(name).test_split) for name, _ in found}


def table(text: str, first_header: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_results_table_matches_summary_and_base(run_dir):
    text = (run_dir / "encoder" / "README.md").read_text()
    mine = json.loads((run_dir / "eval" / "encoder" / "summary.json").read_text())
    base = {r["dataset"]: r for r in json.loads((run_dir / "eval" / "base" / "summary.json").read_text())["results"]}
    rows = table(text, "Task")
    assert len(rows) == len(mine["results"])
    for cells, row in zip(rows, mine["results"], strict=True):
        assert cells[1:4] == [row["dataset"], row["metric"], f"{row['test_mean']:.2f} ± {row['test_ci95']:.2f}"]
        other = base[row["dataset"]]
        assert cells[4] == f"{other['test_mean']:.2f} ± {other['test_ci95']:.2f}"
        assert cells[5] == f"{row['test_mean'] - other['test_mean']:+.2f}"
    families = table(text, "Task family (mean)")
    assert [float(c[1]) for c in families] == [round(v, 2) for v in mine["family_means"].values()]


def test_what_was_done_in_numbers(run_dir):
    text = (run_dir / "encoder" / "README.md").read_text()
    record = json.loads((run_dir / "run_record.json").read_text())
    assert f"{record['steps']:,} optimizer steps, {record['tokens_seen']:,} tokens seen" in text
    assert "mask ratio 40%" in text and "`<mask>` (added)" in text
    assert "1h 02m 05s" in text and "42.2%" in text and "2 attention modules patched" in text
    assert "arXiv:2507.00994" in text and CARD_MARKER in text


def test_snippets_run_as_written_without_hf_encoderize(run_dir):
    text = (run_dir / "encoder" / "README.md").read_text()
    snippets = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(snippets) == 4 and all(str((run_dir / "encoder").resolve()) in s for s in snippets)
    # One clean interpreter, each snippet in its own namespace; `import hf_encoderize` fails there.
    program = "import sys\nsys.modules['hf_encoderize'] = None\nimport json\n" + "".join(
        f"exec(compile({s!r}, 'snippet{i}', 'exec'), {{}})\nprint('snippet{i} ok', flush=True)\n"
        for i, s in enumerate(snippets))
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=600,
                          cwd=run_dir.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [line for line in done.stdout.splitlines() if line.endswith(" ok")] == [f"snippet{i} ok" for i in range(4)]
    assert "torch.Size([2, 32])" in done.stdout  # AutoModel mean pooling: 2 sentences x hidden 32
    assert "(2, 32)" in done.stdout  # SentenceTransformer embeddings


def test_repo_id_goes_into_snippets_and_plots(run_dir):
    text = render_card(gather_facts(CardConfig(str(run_dir), repo_id="someone/tiny-encoder",
                                               base_model_id="HuggingFaceTB/SmolLM2-135M")))
    assert 'from_pretrained("someone/tiny-encoder")' in text
    assert "![Training and held-out loss](plots/loss_curve.png)" in text
    meta = yaml.safe_load(text.split("---\n")[1])
    assert meta["base_model"] == "HuggingFaceTB/SmolLM2-135M"
    assert meta["model-index"][0]["name"] == "someone/tiny-encoder"  # the Hub id names it (issue 66 point 5)
    assert text.split("---\n", 2)[2].split("\n# ", 1)[1].startswith("someone/tiny-encoder\n")
    assert "Named after its local folder" not in text
    local = render_card(gather_facts(CardConfig(str(run_dir))))
    assert "\n# run\n" in local and "Named after its local folder: pass `--model-id`" in local  # and says so


def test_converted_encoder_without_run_or_eval(tmp_path):
    out = make_run_folder(tmp_path, evaluated=False, base_evaluated=False)
    (out / "run_record.json").unlink()
    write_card(CardConfig(str(out / "encoder")))  # a bare encoder folder, as convert writes it
    text = (out / "encoder" / "README.md").read_text()
    assert "Training | none" in text and "Not evaluated yet" in text
    assert "model-index" not in front_matter(out / "encoder" / "README.md")
    assert "check the base model's license" in text  # no README, no GGUF, not a Hub id: unknown, and said so


def test_license_from_gguf_metadata(tmp_path):
    from gguf import GGUFWriter

    from hf_encoderize.model.licenses import base_license

    writer = GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    writer.add_license("apache-2.0")
    writer.add_languages(["en", "fr"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert base_license(str(tmp_path), "m.gguf", None, None) == ("apache-2.0", ["en", "fr"])


def test_base_comparison_only_where_evaluated(tmp_path):
    out = make_run_folder(tmp_path, base_evaluated=False)
    write_card(CardConfig(str(out)))
    text = (out / "encoder" / "README.md").read_text()
    assert "Base model | Δ" not in text and "| Task | Dataset | Metric | run |" in text


def test_hand_written_card_is_kept(tmp_path, capsys):
    out = make_run_folder(tmp_path, evaluated=False, base_evaluated=False)
    readme = out / "encoder" / "README.md"
    readme.write_text("# My own card\n")
    assert main(["card", str(out)]) == 2
    assert "was not written by hf-encoderize" in capsys.readouterr().err
    assert readme.read_text() == "# My own card\n"
    assert main(["card", str(out), "--overwrite"]) == 0
    assert CARD_MARKER in readme.read_text()
    assert main(["card", str(out)]) == 0  # a generated card is regenerated freely


def test_card_config_errors(tmp_path):
    with pytest.raises(EncoderizeError, match="not a folder"):
        CardConfig(str(tmp_path / "missing"))
    with pytest.raises(EncoderizeError, match="no summary.json"):
        CardConfig(str(tmp_path), results_dir=str(tmp_path))
    with pytest.raises(EncoderizeError, match="no saved encoder in"):
        write_card(CardConfig(str(tmp_path)))
    (tmp_path / "summary.json").write_text("{not json")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(EncoderizeError, match="not valid JSON"):
        write_card(CardConfig(str(tmp_path), results_dir=str(tmp_path)))


def test_summary_helper_matches_contract():
    # The fixtures the card tests rely on carry every key of the eval contract.
    data = summary("x")
    assert set(data) == {"model", "model_name", "mode", "profile", "protocol", "results", "family_means"}
    assert set(data["results"][0]) == {"task", "dataset", "metric", "best_lr", "test_mean", "test_ci95", "n_seeds",
                                       "val_mean", "lr_spread", "per_lr", "extra_metrics", "note"}


def test_card_options_survive_regeneration(tmp_path):
    out = make_run_folder(tmp_path, evaluated=False, base_evaluated=False)
    assert main(["card", str(out), "--base-model-id", "HuggingFaceTB/SmolLM2-135M", "--license", "apache-2.0"]) == 0
    assert main(["card", str(out)]) == 0  # e.g. `push` or `run` regenerating it later
    meta = front_matter(out / "encoder" / "README.md")
    assert meta["base_model"] == "HuggingFaceTB/SmolLM2-135M" and meta["license"] == "apache-2.0"


def serve_commands_in(text: str) -> list[tuple[str, bool, str, str]]:
    """(engine, marked verified, language, code) of each command in the card's "Serve it" section."""
    section = text.split("## Serve it", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"\*\*(.+?)\*\* \((verified|not verified)\)[^\n]*\n+```(\w+)\n(.*?)```", section, flags=re.S)
    return [(engine, mark == "verified", language, code) for engine, mark, language, code in found]


def test_serve_section_marks_only_what_a_test_runs(run_dir):
    commands = serve_commands_in((run_dir / "encoder" / "README.md").read_text())
    by_engine = {engine: (verified, code) for engine, verified, _, code in commands}
    # The one command marked verified without an export is the PyTorch snippet that the snippets test above runs.
    assert [engine for engine, verified, _, _ in commands if verified] == ["sentence-transformers (PyTorch)"]
    assert "ONNX Runtime" not in by_engine  # no export, no ONNX command
    tei, vllm = by_engine["Text Embeddings Inference"], by_engine["vLLM"]
    assert tei == (False, f"text-embeddings-router --model-id {(run_dir / 'encoder').resolve()} --pooling mean\n")
    assert not vllm[0] and "--runner pooling --convert embed" in vllm[1]
    assert """--hf-overrides '{"is_causal": false}'""" in vllm[1] and """'{"pooling_type": "MEAN"}'""" in vllm[1]
    assert "No GGUF export yet: `hf-encoderize export" in (run_dir / "encoder" / "README.md").read_text()


def test_matryoshka_sizes_and_truncation_on_the_card(tmp_path, capsys):
    from conftest import make_decoder, make_tokenizer

    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.saving import save_encoder

    model, tokenizer = make_decoder(), make_tokenizer()
    report = encoderize(model, tokenizer)
    encoder = save_encoder(model, tokenizer, tmp_path / "embedder", metadata=report.to_dict())
    stage = {"objective": "supervised", "pooling": "mean", "loss": "mnrl", "steps": 2, "batch_size": 2,
             "learning_rate": 1e-5, "scale": 20.0, "rows": 4, "final_loss": 1.0, "lead": ""}
    (encoder / "contrastive_run.json").write_text(json.dumps(
        {"source": str(encoder), "config": {"matryoshka_dims": "8,32,16"}, "stage": stage, "losses": [1.0]}))
    text = write_card(CardConfig(str(encoder))).read_text()
    assert "to each of 32, 16, 8\ndimensions" in text
    assert "This run recorded no retrieval score at each dimension" in text  # none recorded: none invented
    snippet = re.search(r"## Smaller embeddings.*?```python\n(.*?)```", text, flags=re.S).group(1)
    assert "truncate_dim=16" in snippet
    exec(compile(snippet, "matryoshka", "exec"), {})  # runs as printed
    assert "(2, 16)" in capsys.readouterr().out
