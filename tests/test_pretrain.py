"""From-scratch CLM -> MLM pretraining: the switch happens at the right step (probe before and after), the learning
rate is one WSD curve across it, a branch from the switch checkpoint equals the unbroken run, bad input is one line."""

import json

import pytest
import torch
from conftest import make_decoder, make_tokenizer
from hub_server import fake_hub  # noqa: F401 (a fixture)
from safetensors.torch import load_file

import hf_encoderize.training.engine.loop as train_module
from hf_encoderize.cli import main
from hf_encoderize.data.sources import DataConfig
from hf_encoderize.model.bidirectional import verify_bidirectional
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.recipes.pretrain import PretrainConfig, pretrain
from hf_encoderize.training.schedule import wsd_factor
from hf_encoderize.training.train_config import TrainConfig


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Llama config file, a tokenizer folder and a corpus of arithmetic word runs (learnable structure)."""
    root = tmp_path_factory.mktemp("pretrain")
    make_decoder().config.to_json_file(root / "config.json")
    make_tokenizer().save_pretrained(root / "tokenizer")
    generator = torch.Generator().manual_seed(0)
    with (root / "docs.jsonl").open("w") as handle:
        for index in range(300):
            start, length = torch.randint(0, 60, (1,), generator=generator).item(), 6 + index % 12
            handle.write(json.dumps({"text": " ".join(f"w{start + i}" for i in range(length))}) + "\n")
    return root


def _run(tiny, out, schedule="clm:0.5,mlm:0.5", steps=8, **train):
    spec = PretrainConfig(model_config=str(tiny / "config.json"), tokenizer=str(tiny / "tokenizer"), schedule=schedule)
    data = DataConfig(data_files=str(tiny / "docs.jsonl"), seq_len=32, eval_documents=16)
    settings = dict(output_dir=str(out), steps=steps, batch_size=4, lr=3e-3, save_every=100, eval_every=0,
                    log_every=100, progress=False)
    return pretrain(spec, data, MaskingConfig(), TrainConfig(**{**settings, **train}))


def _metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def unbroken(tiny, tmp_path_factory):
    """A clm:0.5,mlm:0.5 run of 12 steps (switch after step 6), with the probe run around the switch and every
    step's target recorded."""
    seen, out = [], tmp_path_factory.mktemp("runs") / "unbroken"
    real_step = train_module.train_step

    def probing_step(run, **options):
        model = run.accelerator.unwrap_model(run.model).model
        if len(seen) in (5, 6):  # the last CLM step and the first MLM step: the full behavioural probe
            probe = verify_bidirectional(model, pad_token_id=run.tokenizer.pad_token_id, raise_on_failure=False)
            seen.append((run.masker.target.name, probe.passed))
        else:
            seen.append((run.masker.target.name, getattr(model.config, "is_causal", True) is False))
        return real_step(run, **options)

    train_module.train_step = probing_step
    try:
        summary = _run(tiny, out, steps=12, warmup_steps=4, decay_fraction=0.2)
    finally:
        train_module.train_step = real_step
    return out, summary, seen


def test_switch_at_the_right_step_with_one_wsd_curve(unbroken):
    out, summary, seen = unbroken
    # Causal next-token training for steps 1-6, bidirectional masked-token training for steps 7-12.
    assert seen == [("clm", False)] * 6 + [("mlm", True)] * 6
    records = _metrics(out)
    train = [r for r in records if r["kind"] == "train"]
    # One WSD curve over all 12 steps: no second warmup at the switch, decay only in the last 2 steps.
    assert [r["lr"] for r in train] == pytest.approx([3e-3 * wsd_factor(s, 12, 4, 2) for s in range(12)])
    assert [r["lr"] for r in train[3:9]] == pytest.approx([3e-3] * 6)
    # At the switch: a CLM score of the first phase, and the state saved where a branch can start from.
    assert [(r["step"], sorted(r)[1]) for r in records if r["kind"] == "eval"] == [
        (6, "eval_next_token_accuracy"), (12, "eval_masked_accuracy")]
    assert json.loads((out / "switch" / "step-0000006" / "trainer_state.json").read_text())["step"] == 6
    record = json.loads((out / "run_record.json").read_text())
    assert record["command"] == "pretrain" and record["switch_step"] == 6 and record["phases"] == "clm+mlm"
    assert record["base_model"] is None and record["encoderize"]["tokens"]["mask_token"] == "<mask>"
    config = json.loads((out / "encoder" / "config.json").read_text())
    assert config["is_causal"] is False and config["vocab_size"] == 123  # the mask row was there from step 0
    assert 0.0 <= summary["eval_masked_accuracy"] <= 1.0 and summary["steps"] == 12


def test_branches_equal_the_unbroken_run(tiny, unbroken, tmp_path):
    out, summary, _ = unbroken
    expected = load_file(out / "encoder" / "model.safetensors")
    # From the run's own switch checkpoint...
    _run(tiny, tmp_path / "branch", steps=12, warmup_steps=4, decay_fraction=0.2,
         from_checkpoint=str(out / "switch" / "step-0000006"))
    # ...and, as the paper reused its CLM runs, from step 6 of a CLM-only run with the same warmup.
    _run(tiny, tmp_path / "clm", schedule="clm:1.0", steps=12, warmup_steps=4, decay_fraction=0.2, save_every=6)
    _run(tiny, tmp_path / "from-clm", steps=12, warmup_steps=4, decay_fraction=0.2,
         from_checkpoint=str(tmp_path / "clm" / "checkpoints" / "step-0000006"))
    unbroken_train = [r for r in _metrics(out) if r["kind"] == "train"]
    for branch in ("branch", "from-clm"):
        # The branch's metrics carry the source's first 6 steps, then its own: one 12-step history.
        train = [r for r in _metrics(tmp_path / branch) if r["kind"] == "train"]
        assert [r["step"] for r in train] == list(range(1, 13))
        assert [r["loss"] for r in train[6:]] == pytest.approx([r["loss"] for r in unbroken_train[6:]], abs=1e-5)
        weights = load_file(tmp_path / branch / "encoder" / "model.safetensors")
        for name, tensor in expected.items():
            torch.testing.assert_close(weights[name], tensor, msg=f"{branch}: {name}")
    clm_only = load_file(tmp_path / "clm" / "encoder" / "model.safetensors")
    assert not torch.allclose(clm_only["model.norm.weight"], expected["model.norm.weight"])


def test_resume_inside_the_mlm_phase_equals_the_unbroken_run(tiny, unbroken, tmp_path, monkeypatch):
    real_step, calls = train_module.train_step, []

    def dies_at_step_ten(run, **options):
        calls.append(run.masker.target.name)
        if len(calls) == 10:
            raise KeyboardInterrupt  # after the step-8 checkpoint, two steps into the MLM phase
        return real_step(run, **options)

    monkeypatch.setattr(train_module, "train_step", dies_at_step_ten)
    settings = dict(steps=12, warmup_steps=4, decay_fraction=0.2, save_every=4)
    with pytest.raises(KeyboardInterrupt):
        _run(tiny, tmp_path / "run", **settings)
    monkeypatch.setattr(train_module, "train_step", real_step)
    _run(tiny, tmp_path / "run", resume=True, **settings)  # rebuilt causal, switched again on entering MLM
    expected = load_file(unbroken[0] / "encoder" / "model.safetensors")
    resumed = load_file(tmp_path / "run" / "encoder" / "model.safetensors")
    for name, tensor in expected.items():
        torch.testing.assert_close(resumed[name], tensor, msg=name)


def test_bad_input_is_one_line(tiny, unbroken, tmp_path, capsys, monkeypatch):
    import hf_encoderize.recipes.pretrain as pretrain_module

    base = ["pretrain", "--model-config", str(tiny / "config.json"), "--tokenizer", str(tiny / "tokenizer"),
            "--data-files", str(tiny / "docs.jsonl"), "--max-seq-length", "32", "--output-dir", str(tmp_path / "o")]
    switch = str(unbroken[0] / "switch" / "step-0000006")
    cases = [
        (["--schedule", "clm:0.5,nsp:0.5"], "unknown phase 'nsp'"),
        (["--schedule", "clm:0.5,mlm:0.4"], "shares sum to 0.9, not 1"),
        (["--schedule", "mlm:0.5,clm:0.5"], "clm before mlm"),
        (["--schedule", "clm:0.01,mlm:0.99", "--max-steps", "20"], "phase clm gets 0 of 20 steps"),
        (["--model-config", "7B"], "not 210M/610M/1B"),
        (["--max-seq-length", "128"], "above the model's limit of 64 positions"),
        (["--from-checkpoint", str(tmp_path)], "is not a checkpoint folder"),
        (["--from-checkpoint", switch, "--max-steps", "12", "--schedule", "clm:0.25,mlm:0.75", "--warmup-steps", "4",
          "--decay-fraction", "0.2", "--learning-rate", "3e-3", "--batch-size", "4", "--eval-documents", "16"],
         "and this one differ"),
        (["--from-checkpoint", switch, "--max-steps", "12"], "train.lr was 0.003, now 0.0001"),
        # every field that counts, as a resume compares them (the old hand list of 13 keys let the optimizer differ)
        (["--from-checkpoint", switch, "--max-steps", "12", "--warmup-steps", "4", "--decay-fraction", "0.2",
          "--learning-rate", "3e-3", "--batch-size", "4", "--eval-documents", "16", "--adam-epsilon", "1e-6"],
         "train.adam_eps was 1e-05, now 1e-06"),
        (["--model-config", "1B", "--max-seq-length", "2048", "--batch-size", "12"], "GiB to train at batch 12 x 2048"),
    ]
    monkeypatch.setattr(pretrain_module, "available_memory", lambda: (16 * 2**30, "available RAM"))
    for extra, message in cases:
        code = main(base + extra)
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("\n") == 1, (extra, err)
    assert "(1,409M parameters)" in err and "16.0 GiB of available RAM" in err


def test_paper_configs_match_appendix_a():
    from pathlib import Path

    from transformers import AutoConfig

    from hf_encoderize.recipes.pretrain import estimate_memory, model_config_from

    folder = Path(__file__).resolve().parents[1] / "examples" / "configs"
    # the names count the encoder without its LM head (Appendix A; EuroBERT unties the head)
    expected = {"210m": (12, 768, 3072, 12, 12, 211), "610m": (26, 1152, 4096, 18, 6, 607),
                "1b": (28, 1728, 5120, 18, 6, 1187)}
    for name, (layers, width, ffn, heads, kv, millions) in expected.items():
        config = AutoConfig.from_pretrained(folder / f"{name}.json")
        assert config.to_diff_dict() == model_config_from(name).to_diff_dict()
        assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size, config.num_attention_heads,
                config.num_key_value_heads) == (layers, width, ffn, heads, kv)
        assert config.vocab_size == 128256 and config.max_position_embeddings == 2048 and config.hidden_act == "silu"
        assert config.rope_parameters["rope_theta"] == 10000.0 and not config.tie_word_embeddings
        memory = estimate_memory(config, DataConfig(seq_len=2048), TrainConfig(batch_size=12), mixed_precision=True)
        head = config.vocab_size * config.hidden_size
        assert (memory["parameters"] - head) // 10**6 == millions  # untied: the head is extra


def test_card_of_a_pretrain_run_describes_the_schedule(unbroken):
    from hf_encoderize.publish.card import CardConfig, write_card

    out, _, _ = unbroken
    text = " ".join(write_card(CardConfig(str(out))).read_text().split())  # line breaks as spaces
    assert "pretrained from random weights" in text and "`clm:0.5,mlm:0.5` over 12 steps" in text
    assert "switch to bidirectional attention and masked language modelling at step 6" in text
    assert "| Objective | CLM for steps 0-6, then MLM for steps 6-12, mask ratio 40%" in text
    assert "causal during CLM, switched to bidirectional at step 6" in text
    assert "unknown" not in text and "| Objective | ?" not in text
    from huggingface_hub import ModelCard

    assert "base_model" not in ModelCard.load(out / "encoder" / "README.md").data.to_dict()


def test_pretrain_push_to_hub_pushes_the_encoder_and_its_card(tiny, tmp_path, fake_hub):  # noqa: F811
    out = tmp_path / "pushed"
    assert main(["pretrain", "--model-config", str(tiny / "config.json"), "--tokenizer", str(tiny / "tokenizer"),
                 "--data-files", str(tiny / "docs.jsonl"), "--max-seq-length", "32", "--eval-documents", "16",
                 "--max-steps", "4", "--batch-size", "4", "--save-steps", "100", "--no-progress", "--output-dir",
                 str(out),
                 "--push-to-hub", "someone/pretrained", "--hub-private"]) == 0
    files = fake_hub.files("someone/pretrained")
    assert {"model.safetensors", "config.json", "README.md"} <= set(files)
    assert not any(name.startswith(("checkpoints/", "switch/")) for name in files)
    card = files["README.md"].decode()
    assert "pretrained from random weights" in card and fake_hub.repos["someone/pretrained"]["private"] is True
