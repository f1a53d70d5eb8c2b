"""Issue 30's contrastive cases: a checkpoint cut mid-save, a resume with another LoRA setting, LoRA seeding, SimCSE
without dropout, too few distinct texts for a batch, a `--lora-targets` typo, and the Hub corpus streamed by `run`.

Each refusal is exit 2 with exactly one `error:` line and no traceback, before the output folder is touched."""

import json

import pytest
import torch
from conftest import contrastive_config, interrupt_at_step, make_decoder, make_tokenizer, peft_integration_refused
from safetensors.torch import load_file

from hf_encoderize.cli import main
from hf_encoderize.recipes.contrastive import contrastive, work_dir
from hf_encoderize.training.lora import AdapterConfig

needs_peft_integration = pytest.mark.skipif(peft_integration_refused() is not None,
                                            reason=str(peft_integration_refused()))
_config = contrastive_config


def _argv(encoder, text, out, *extra):
    return ["contrastive", str(encoder), "--data-files", str(text), "--output-dir", str(out), "--max-steps", "6",
            "--batch-size", "8", "--save-steps", "2", "--max-seq-length", "16", "--no-progress", *extra]


def _one_error_line(capsys, *words):
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _interrupted(encoder, text, out, monkeypatch, adapter=None, at_call=5, **extra):
    """A run stopped after its step-4 checkpoint (the fifth training step raises), as a kill would leave it."""
    with interrupt_at_step(at_call), pytest.raises(KeyboardInterrupt):
        contrastive(_config(encoder, text, out, **extra), adapter)
    return work_dir(out) / "trainer"


def _cut_state(checkpoint):
    (checkpoint / "trainer_state.json").unlink()  # the Trainer writes it last: killed before it


def _cut_weights(checkpoint):
    _cut_state(checkpoint)
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])


def _cut_optimizer(checkpoint):
    optimizer = checkpoint / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:100])


CUT_MID_SAVE = {"no trainer_state.json": _cut_state, "truncated weights": _cut_weights,
                "truncated optimizer": _cut_optimizer}


@pytest.fixture(scope="module")
def unbroken(encoder, text, tmp_path_factory):
    out = tmp_path_factory.mktemp("unbroken") / "out"
    contrastive(_config(encoder, text, out))
    return load_file(out / "model.safetensors")


@pytest.mark.parametrize("cut", CUT_MID_SAVE.values(), ids=CUT_MID_SAVE.keys())
def test_resume_after_a_cut_checkpoint_falls_back_to_the_one_before(cut, unbroken, encoder, text, tmp_path,
                                                                     monkeypatch, capsys):
    out = tmp_path / "broken"
    trainer = _interrupted(encoder, text, out, monkeypatch)
    cut(trainer / "checkpoint-4")
    capsys.readouterr()
    assert main(_argv(encoder, text, out, "--resume")) == 0
    err = capsys.readouterr().err
    assert "warning: checkpoint" in err and "checkpoint-4" in err and "Traceback" not in err
    resumed = load_file(out / "model.safetensors")
    for name, tensor in unbroken.items():
        torch.testing.assert_close(resumed[name], tensor, msg=name)  # steps 3-6 retrained from checkpoint-2


def test_resume_with_every_checkpoint_cut_is_one_line(encoder, text, tmp_path, monkeypatch, capsys):
    out = tmp_path / "broken"
    trainer = _interrupted(encoder, text, out, monkeypatch)
    for checkpoint in trainer.iterdir():
        _cut_state(checkpoint)
    capsys.readouterr()
    assert main(_argv(encoder, text, out, "--resume")) == 2
    _one_error_line(capsys, "no checkpoint", "is whole", "--overwrite")
    assert sorted(p.name for p in trainer.iterdir()) == ["checkpoint-2", "checkpoint-4"]  # nothing moved or deleted


@needs_peft_integration
@pytest.mark.parametrize("changed", [["--lora-alpha", "32"], ["--lora-r", "8"], ["--lora-targets", "q_proj"]],
                         ids=["lora_alpha", "lora_r", "lora_targets"])
def test_resume_with_another_lora_setting_is_refused(changed, encoder, text, tmp_path, monkeypatch, capsys):
    out = tmp_path / "lora"
    _interrupted(encoder, text, out, monkeypatch, AdapterConfig(lora_r=4), at_call=3)
    before = sorted(p.name for p in (work_dir(out) / "trainer").iterdir())
    capsys.readouterr()
    base = {"--lora-r": "4", changed[0]: changed[1]}
    assert main(_argv(encoder, text, out, "--resume", *[x for pair in base.items() for x in pair])) == 2
    _one_error_line(capsys, changed[0][2:].replace("-", "_"), "resume with the same ones")
    assert sorted(p.name for p in (work_dir(out) / "trainer").iterdir()) == before and not out.exists()


@needs_peft_integration
def test_the_same_seed_with_lora_gives_the_same_weights(encoder, text, tmp_path):
    """LoRA's A matrices are drawn when the adapters are added, before the Trainer seeds: they are seeded too."""
    adapters = []
    for name in ("first", "second"):
        out = tmp_path / name
        contrastive(_config(encoder, text, out, steps=2, learning_rate=1e-2, seed=7),
                    AdapterConfig(lora_r=4, save_adapter=True))
        adapters.append(load_file(out / "adapter" / "adapter_model.safetensors"))
        merged = load_file(out / "model.safetensors")
        if name == "first":
            first = merged
    assert adapters[0].keys() == adapters[1].keys() and adapters[0]
    for name, tensor in adapters[0].items():
        assert torch.equal(adapters[1][name], tensor), name
    for name, tensor in first.items():
        assert torch.equal(merged[name], tensor), name


@pytest.mark.parametrize(("dropout", "warned"), [("0", True), ("0.3", False)])
def test_simcse_without_dropout_says_so_in_one_line(dropout, warned, encoder, text, tmp_path, capsys):
    assert main(_argv(encoder, text, tmp_path / "out", "--max-steps", "1", "--dropout", dropout)) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: simcse")]
    assert len(lines) == int(warned)
    if warned:
        assert "identical" in lines[0] and "--dropout 0.1" in lines[0]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


FEW_DISTINCT = {  # rows, extra options, words of the one error line
    "simcse: 3 distinct texts in 12 rows, batch 8": (
        [{"text": f"w{i % 3} w9"} for i in range(12)], [], ["3 distinct text", "batch of 8", "--batch-size 3"]),
    "simcse: one text in 3 rows, fewer rows than a batch": (
        [{"text": "w1 w2"}] * 3, [], ["1 distinct text", "add distinct texts"]),
    "supervised: pairs sharing one anchor": (
        [{"anchor": "w1 w2", "positive": f"w{i} w5"} for i in range(12)], ["--method", "supervised"],
        ["1 row(s) that share no text", "batch of 8"]),
}


@pytest.mark.parametrize(("rows", "extra", "words"), FEW_DISTINCT.values(), ids=FEW_DISTINCT.keys())
def test_fewer_distinct_texts_than_a_batch_is_refused_before_training(rows, extra, words, encoder, tmp_path,
                                                                      monkeypatch, capsys):
    from hf_encoderize.recipes.contrastive import train as recipe

    monkeypatch.setattr(recipe, "build_model", lambda *a, **k: pytest.fail("the model was loaded"))
    data, out = _jsonl(tmp_path / "few.jsonl", rows), tmp_path / "out"
    assert main(_argv(encoder, data, out, *extra)) == 2  # it trained 0 steps and reported `steps: 6`
    _one_error_line(capsys, *words)
    assert not out.exists() and not work_dir(out).exists()


@needs_peft_integration
@pytest.mark.parametrize("skeleton", [True, False], ids=["before the load", "once loaded"])
def test_a_lora_targets_typo_is_one_line(skeleton, encoder, text, tmp_path, monkeypatch, capsys):
    from transformers import AutoModel

    from hf_encoderize.recipes.contrastive import train as recipe

    if skeleton:  # the check needs only the config: the load is never reached
        monkeypatch.setattr(recipe, "build_model", lambda *a, **k: pytest.fail("the model was loaded"))
    else:  # a config that does not build on the meta device: checked on the loaded model, before peft
        monkeypatch.setattr(AutoModel, "from_config", lambda *a, **k: (_ for _ in ()).throw(ValueError("no")))
    out = tmp_path / "out"
    assert main(_argv(encoder, text, out, "--lora-r", "4", "--lora-targets", "q_prj,v_proj")) == 2  # trained before
    _one_error_line(capsys, "'q_prj'", "q_proj", "all-linear")
    assert not out.exists() and not work_dir(out).exists()


def test_a_lora_targets_typo_in_cpt_is_one_line(tmp_path, capsys):
    model, tokenizer = make_decoder(), make_tokenizer()
    model.save_pretrained(tmp_path / "decoder")
    tokenizer.save_pretrained(tmp_path / "decoder")
    corpus = _jsonl(tmp_path / "corpus.jsonl", [{"text": " ".join(f"w{i}" for i in range(20))}] * 8)
    out = tmp_path / "out"
    assert main(["cpt", str(tmp_path / "decoder"), "--output-dir", str(out), "--data-files", str(corpus),
                 "--max-steps", "2", "--max-seq-length", "32", "--eval-documents", "0", "--lora-r", "4",
                 "--lora-targets", "q_prj"]) == 2  # after cpt's load, before any training
    _one_error_line(capsys, "'q_prj'", "q_proj", "all-linear")


def test_run_contrastive_streams_the_hub_corpus_and_reads_only_the_rows_it_uses(tmp_path, monkeypatch):
    """`run --contrastive simcse` on the default Hub corpus (fineweb-edu, 10B tokens) downloaded all of it."""
    import datasets

    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.pipeline.run import RunConfig, contrastive_config, run_contrastive
    from hf_encoderize.recipes.contrastive import load_rows

    calls, read = [], {"rows": 0}

    def corpus():  # a local stand-in for the Hub corpus, counting the rows read from it
        for i in range(10_000):
            read["rows"] += 1
            yield {"text": f"w{i} w{i + 1} w{i + 2}", "url": "u"}

    def load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        if not kwargs.get("streaming"):
            raise AssertionError("the Hub corpus must be streamed, not downloaded")
        return datasets.IterableDataset.from_generator(corpus)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    run = RunConfig(contrastive=run_contrastive(method="simcse", steps=3, batch_size=4), eval=None)
    config = contrastive_config(DataConfig(), run, tmp_path / "run")
    assert config.dataset == "HuggingFaceFW/fineweb-edu"
    rows = load_rows(config)
    assert [args[:1] for args, _ in calls] == [("HuggingFaceFW/fineweb-edu",)] and calls[0][1]["streaming"] is True
    assert len(rows) == 12 and rows[0]["anchor"] == rows[0]["positive"] == "w0 w1 w2"  # 3 steps x 4 rows
    assert read["rows"] <= 12 + 1  # the generator may be asked for one row past the last one taken


def test_the_resume_advice_never_loops_before_a_first_checkpoint(encoder, text, tmp_path, monkeypatch, capsys):
    """Stopped at step 1 (no checkpoint yet): without --resume the line must not send the user to --resume, and with
    it the line must send them to --overwrite, which then works. Before, each message named the other flag."""
    out = tmp_path / "early"
    _interrupted(encoder, text, out, monkeypatch, at_call=1)
    capsys.readouterr()
    assert main(_argv(encoder, text, out)) == 2
    assert "--resume" not in _one_error_line(capsys, "--overwrite")
    assert main(_argv(encoder, text, out, "--resume")) == 2
    _one_error_line(capsys, "no checkpoint", "--overwrite")
    assert main(_argv(encoder, text, out, "--overwrite")) == 0
    assert (out / "model.safetensors").is_file()


def test_a_run_that_goes_live_while_this_one_loads_is_not_wiped(encoder, text, tmp_path, monkeypatch, capsys):
    """Two contrastive runs into one folder (issue 41): both passed the lock check before either locked; the second
    then wiped the first's work folder, lock and checkpoints included, and both exited 0. Now the lock is taken before
    anything in the work folder is deleted, so the later one is refused and the live one's files stay."""
    import json
    import socket
    import subprocess
    import sys

    from hf_encoderize.common.locks import LOCK
    from hf_encoderize.recipes.contrastive import train as recipe

    out, work = tmp_path / "simcse", work_dir(tmp_path / "simcse")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    real_build = recipe.build_model

    def the_other_run_locks_meanwhile(*args, **kwargs):
        (work / "trainer" / "checkpoint-2").mkdir(parents=True)
        (work / "trainer" / "checkpoint-2" / "model.safetensors").write_bytes(b"the live run's weights")
        (work / LOCK).write_text(json.dumps({"pid": live.pid, "host": socket.gethostname(), "command": "contrastive"}))
        return real_build(*args, **kwargs)

    monkeypatch.setattr(recipe, "build_model", the_other_run_locks_meanwhile)
    try:
        code = main(_argv(encoder, text, out))
        _one_error_line(capsys, "in use by a running contrastive")
        assert code == 2
        assert (work / "trainer" / "checkpoint-2" / "model.safetensors").read_bytes() == b"the live run's weights"
        assert json.loads((work / LOCK).read_text())["pid"] == live.pid
    finally:
        live.kill()
        live.wait()


def test_hard_negatives_that_leave_no_batch_are_refused(encoder, tmp_path, monkeypatch, capsys):
    """Mined negatives are other rows' positives: when every row shares one, no batch forms without a repeated text,
    and the run trained 0 steps with exit 0 while its record said 6 (issue 41). Now one line, before training."""
    import datasets
    import sentence_transformers.util

    def one_negative_for_all(rows, *args, **kwargs):
        anchors, positives = rows["anchor"], rows["positive"]
        return datasets.Dataset.from_dict({"anchor": anchors, "positive": positives,
                                           "negative_1": [positives[0]] * len(anchors)})

    monkeypatch.setattr(sentence_transformers.util, "mine_hard_negatives", one_negative_for_all)
    data = _jsonl(tmp_path / "pairs.jsonl", [{"anchor": f"w{i} w{i + 1}", "positive": f"w{i + 30} w{i + 31}"}
                                             for i in range(12)])
    out = tmp_path / "out"
    assert main(_argv(encoder, data, out, "--method", "supervised", "--hard-negatives", "1")) == 2
    _one_error_line(capsys, "after mining --hard-negatives 1", "1 row(s) that share no text", "batch of 8")
    assert not (out / "model.safetensors").exists()
