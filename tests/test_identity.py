""""Is this the same run?" has one answer (`common.identity`): a resume, a branch and `run`'s reuse of a finished stage
refuse, in one line naming the field, any setting that changes training; harmless ones (speed, logging) pass; run
folders recorded before the identity existed still resume."""

import dataclasses
import json
import shutil

import pytest
from conftest import write_corpus

from hf_encoderize.cli import main
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import HARMLESS, LENGTH, RESUME, identity_of, kind_of, names_of
from hf_encoderize.data.sources import DataConfig
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.pipeline.reuse import cpt_done
from hf_encoderize.recipes.contrastive import ContrastiveConfig
from hf_encoderize.recipes.cpt import cpt
from hf_encoderize.training.lora import AdapterConfig
from hf_encoderize.training.resume_checks import HARMLESS_CHANGES, IDENTITY, SETTINGS_FILE
from hf_encoderize.training.train_config import TrainConfig

TRAIN = dict(steps=4, batch_size=4, lr=1e-3, save_every=2, eval_every=0, log_every=100, progress=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("data") / "docs.jsonl", 200, lambda i: 6 + i % 12)


@pytest.fixture(scope="module")
def interrupted(decoder_dir, corpus, tmp_path_factory):
    """A cpt run folder cut after its step-2 checkpoint (the final encoder removed, as a kill would leave it)."""
    out = tmp_path_factory.mktemp("run") / "cut"
    cpt(LoadConfig(str(decoder_dir)), DataConfig(data_files=str(corpus), seq_len=32, eval_documents=8),
        MaskingConfig(), TrainConfig(output_dir=str(out), **TRAIN))
    shutil.rmtree(out / "checkpoints" / "step-0000004")
    return out


def _resume(decoder_dir, corpus, out, load=None, data=None, train=None):
    return cpt(LoadConfig(str(decoder_dir), **(load or {})),
               DataConfig(data_files=str(corpus), seq_len=32, eval_documents=8, **(data or {})), MaskingConfig(),
               TrainConfig(output_dir=str(out), **{**TRAIN, "resume": True, **(train or {})}))


@pytest.mark.parametrize("change, field", [
    (dict(load={"dtype": "bfloat16"}), "load.dtype"),
    (dict(load={"attn_implementation": "eager"}), "load.attn_implementation"),
    (dict(train={"mixed_precision": "no"}), "train.mixed_precision"),
    (dict(train={"on_nonfinite": "skip"}), "train.on_nonfinite"),
    (dict(train={"master_weights": "loaded"}), "train.master_weights"),
    (dict(data={"shuffle_buffer": 8}), "data.shuffle_buffer"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_a_resume_that_changes_training_is_refused_naming_the_field(decoder_dir, corpus, interrupted, tmp_path,
                                                                     change, field):
    folder = tmp_path / "copy"
    shutil.copytree(interrupted, folder)
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    with pytest.raises(EncoderizeError, match=rf"--resume with other settings than the run's \({field} was "):
        _resume(decoder_dir, corpus, folder, **change)
    after = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert after == before  # refused before anything was written


def test_the_refusal_is_one_error_line_on_the_command_line(decoder_dir, corpus, interrupted, tmp_path, capsys):
    folder = tmp_path / "copy"
    shutil.copytree(interrupted, folder)
    code = main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-seq-length", "32", "--eval-documents",
                 "8",
                 "--max-steps", "4", "--batch-size", "4", "--learning-rate", "1e-3", "--save-steps", "2",
                 "--eval-steps", "0",
                 "--logging-steps", "100", "--no-progress", "--output-dir", str(folder), "--resume",
                 "--mixed-precision", "no"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        "error: --resume with other settings than the run's (train.mixed_precision was 'auto', now 'no'); resume "
        "with the same ones, or start a new --output-dir"]


def test_a_harmless_change_resumes_and_finishes(decoder_dir, corpus, interrupted, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(interrupted, folder)
    summary = _resume(decoder_dir, corpus, folder, train={"prefetch": 0, "log_every": 1, "keep_last": 3})
    assert summary["steps"] == 4 and (folder / "encoder" / "config.json").is_file()


def test_a_run_folder_recorded_before_the_identity_still_resumes(decoder_dir, corpus, interrupted, tmp_path):
    folder = tmp_path / "old"
    shutil.copytree(interrupted, folder)
    settings = json.loads((folder / SETTINGS_FILE).read_text())
    del settings[IDENTITY]  # what 0.1 wrote: the facts only
    (folder / SETTINGS_FILE).write_text(json.dumps(settings))
    assert _resume(decoder_dir, corpus, folder)["steps"] == 4


def test_data_counts_by_content_not_by_path_text(decoder_dir, corpus, interrupted, tmp_path, monkeypatch):
    """Issue 41: `./docs.jsonl` for the recorded `docs.jsonl` (or a byte-equal copy elsewhere) is the same corpus and
    resumes; the same path edited in place is another corpus and is refused before anything is written."""
    copy = tmp_path / "data" / "docs.jsonl"
    copy.parent.mkdir()
    shutil.copy(corpus, copy)
    folder = tmp_path / "copy"
    shutil.copytree(interrupted, folder)
    monkeypatch.chdir(copy.parent)
    assert _resume(decoder_dir, "./docs.jsonl", folder)["steps"] == 4
    edited = tmp_path / "edited"
    shutil.copytree(interrupted, edited)
    copy.write_text(copy.read_text().replace("w1 ", "w2 ", 1))  # in place: same path, same size, other text
    before = {p.relative_to(edited): p.read_bytes() for p in edited.rglob("*") if p.is_file()}
    with pytest.raises(EncoderizeError, match=r"--resume with other settings than the run's \(data.data_files was "):
        _resume(decoder_dir, "docs.jsonl", edited)
    assert {p.relative_to(edited): p.read_bytes() for p in edited.rglob("*") if p.is_file()} == before


def test_a_checkpoint_without_its_settings_is_refused_for_resume(decoder_dir, corpus, interrupted, tmp_path, capsys):
    """Issue 41: a marked folder with a checkpoint but no run_settings.json resumed under any --seed."""
    folder = tmp_path / "copy"
    shutil.copytree(interrupted, folder)
    (folder / SETTINGS_FILE).unlink()
    code = main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-seq-length", "32", "--eval-documents",
                 "8", "--max-steps", "4", "--batch-size", "4", "--learning-rate", "1e-3", "--save-steps", "2",
                 "--eval-steps", "0", "--no-progress", "--output-dir", str(folder), "--resume", "--seed", "7"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: --resume: {str(folder)!r} holds a checkpoint (step 2) but no {SETTINGS_FILE}, so nothing says which "
        "settings it was made with; start a new --output-dir"]
    assert not (folder / SETTINGS_FILE).exists()


def test_every_field_counts_unless_declared_and_declarations_are_known_kinds():
    for config in (LoadConfig("m"), DataConfig(), MaskingConfig(), TrainConfig(), AdapterConfig(),
                   ContrastiveConfig("enc", output_dir="o", data_files="x.jsonl")):
        for field in dataclasses.fields(config):
            assert kind_of(field) in (RESUME, LENGTH, HARMLESS), (type(config).__name__, field.name)
        counted = identity_of(config)
        declared = set(names_of(type(config), HARMLESS))
        assert ({key.split(".", 1)[1] for key in counted} ==
            {f.name for f in dataclasses.fields(config) if f.name != "_"} - declared)
    assert "mixed_precision" not in HARMLESS_CHANGES and "on_nonfinite" not in HARMLESS_CHANGES
    assert {"compile", "prefetch", "gradient_checkpointing", "log_every"} <= set(HARMLESS_CHANGES)


@pytest.fixture(scope="module")
def finished(decoder_dir, corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "done"
    cpt(LoadConfig(str(decoder_dir)), DataConfig(data_files=str(corpus), seq_len=32, eval_documents=8),
        MaskingConfig(), TrainConfig(output_dir=str(out), **TRAIN))
    return out


@pytest.mark.parametrize("data, train, field", [
    ({"seq_len": 48}, {}, "data.seq_len"),
    ({"data_files": "OTHER"}, {}, "data.data_files"),
    ({}, {"seed": 1}, "train.seed"),
    ({}, {"steps": 6}, "train.steps"),
])
def test_run_never_reuses_a_finished_cpt_made_with_other_data_or_settings(decoder_dir, corpus, finished, tmp_path,
                                                                         data, train, field):
    other = tmp_path / "other.jsonl"
    other.write_text(corpus.read_text().replace("w1 ", "w2 ", 1))  # the same size, another text
    data = {k: (str(other) if v == "OTHER" else v) for k, v in data.items()}
    load, masking, adapter = LoadConfig(str(decoder_dir)), MaskingConfig(), AdapterConfig()
    same = DataConfig(data_files=str(corpus), seq_len=32, eval_documents=8)
    assert cpt_done(finished, load, same, masking, TrainConfig(output_dir=str(finished), **TRAIN), adapter)
    with pytest.raises(EncoderizeError, match=rf"holds a finished cpt with other settings \({field} was "):
        cpt_done(finished, load, dataclasses.replace(same, **data), masking,
                 TrainConfig(output_dir=str(finished), **{**TRAIN, **train}), adapter)


def test_run_redoes_an_evaluation_of_another_attention_mode(tmp_path):
    from hf_encoderize.evaluation import EvalConfig
    from hf_encoderize.evaluation.grid import fingerprint
    from hf_encoderize.pipeline.reuse import eval_done

    results, load = tmp_path / "eval" / "base", LoadConfig("some/model")
    bidirectional = EvalConfig(profile="smoke", output_dir=str(tmp_path / "eval"), name="base")
    results.mkdir(parents=True)
    protocol = bidirectional.protocol()
    rows = [{"task": "sc", "dataset": name} for name in bidirectional.grid().datasets]
    (results / "summary.json").write_text(json.dumps({"model": "some/model", "profile": "smoke",
                                                      "mode": fingerprint(load, bidirectional)["mode"],
                                                      "protocol": protocol, "results": rows}))
    assert eval_done(results, load, bidirectional)
    assert not eval_done(results, load, dataclasses.replace(bidirectional, causal=True))
    assert not eval_done(results, LoadConfig("another/model"), bidirectional)
    assert not eval_done(results, load, dataclasses.replace(bidirectional, max_steps=7))
    # Issue 41: the grid counts (run reused an evaluation made with other --eval-seeds or --eval-lrs).
    grid = bidirectional.grid()
    assert not eval_done(results, load, dataclasses.replace(bidirectional, seeds="5"))
    assert not eval_done(results, load, dataclasses.replace(bidirectional, lrs="0.123"))
    assert not eval_done(results, load, dataclasses.replace(bidirectional, datasets=grid.datasets[0]))
    same = ",".join(str(lr) for lr in reversed(grid.lrs))  # another order is the same grid
    assert eval_done(results, load, dataclasses.replace(bidirectional, lrs=same))


def test_the_eval_fingerprint_is_declared_on_the_fields():
    """Issue 39: which settings make a finished fine-tuning run part of a grid is declared on EvalConfig's fields, and
    one comparison (`protocol_differences`) serves a run's results.json and `run`'s reuse of a summary."""
    from hf_encoderize.evaluation import EvalConfig
    from hf_encoderize.evaluation.grid import FINGERPRINT_KEYS, protocol_differences

    assert set(FINGERPRINT_KEYS) == {"batch_size", "max_steps", "warmup_ratio", "max_length", "qa_stride",
                                     "max_eval_examples", "synthetic_sizes", "optimizer", "dataset_source",
                                     "ndcg_gains", "batching"}
    for field in dataclasses.fields(EvalConfig):
        assert field.name == "_" or "identity" in field.metadata, field.name  # every field says how it counts
    protocol = EvalConfig(profile="smoke").protocol()
    assert protocol_differences(protocol, protocol) == []
    assert protocol_differences(protocol, EvalConfig(profile="smoke", adam_epsilon=1e-6).protocol()) == ["optimizer"]
    assert protocol_differences({}, {"batching": "length"}) == []  # recorded before the key: length-grouped
