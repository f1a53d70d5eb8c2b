"""MLM continued pretraining: loss goes down, resume equals an unbroken run, bad input is one line."""

import json

import pytest
import torch
from conftest import make_decoder, make_tokenizer, write_corpus
from safetensors.torch import load_file

import hf_encoderize.training.engine.loop as train_module
from hf_encoderize.cli import main
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.data.packing import Packer
from hf_encoderize.data.sources import DataConfig
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.recipes.cpt import cpt
from hf_encoderize.training.train_config import TrainConfig


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    # Documents with structure an MLM can learn: each is an arithmetic run of word ids.
    return write_corpus(tmp_path_factory.mktemp("data") / "docs.jsonl", 400, lambda i: 6 + i % 12)


def _run(decoder_dir, corpus, out, **train):
    data = DataConfig(data_files=str(corpus), seq_len=32, eval_documents=16)
    settings = dict(output_dir=str(out), steps=6, batch_size=4, lr=1e-3, save_every=3, eval_every=0, log_every=100)
    return cpt(LoadConfig(str(decoder_dir)), data, MaskingConfig(), TrainConfig(**{**settings, **train}))


def test_loss_goes_down_and_encoder_is_saved(decoder_dir, corpus, tmp_path):
    summary = _run(decoder_dir, corpus, tmp_path / "run", steps=80, save_every=80, lr=3e-3, eval_every=40,
                   log_every=10)
    losses = summary["losses"]
    assert sum(losses[-10:]) / 10 < 0.85 * sum(losses[:5]) / 5, losses
    assert (tmp_path / "run" / "encoder" / "model.safetensors").exists()
    config = json.loads((tmp_path / "run" / "encoder" / "config.json").read_text())
    assert config["is_causal"] is False and config["hf_encoderize"]["mask_ratio"] == 0.4
    assert 0.0 <= summary["eval_masked_accuracy"] <= 1.0 and summary["eval_loss"] < losses[0]
    # What the run leaves behind: metrics per step, the loss curve, and the record the model card reads.
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 81))
    assert [r["loss"] for r in train] == pytest.approx(losses)
    assert all(r["tokens"] > 0 and r["tokens_per_s"] > 0 and r["data_wait_s"] >= 0 for r in train)
    # Masked accuracy costs an arg-max over the vocabulary: computed on logged steps only, null on the others.
    logged = [r["masked_accuracy"] for r in train if r["step"] % 10 == 0]
    assert all(0 <= a <= 1 for a in logged) and logged[-1] > logged[0]
    assert all(r["masked_accuracy"] is None for r in train if r["step"] % 10)
    assert [r["step"] for r in records if r["kind"] == "eval"] == [0, 40, 80]  # 0: the base, before the first step
    assert (tmp_path / "run" / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = json.loads((tmp_path / "run" / "run_record.json").read_text())
    assert record["tokens_seen"] == sum(r["tokens"] for r in train) and record["tokens_seen"] <= 80 * 4 * 32
    assert record["eval_loss"] == pytest.approx(summary["eval_loss"])
    first_eval = next(r for r in records if r["kind"] == "eval")
    assert record["initial_eval_loss"] == first_eval["eval_loss"] > record["eval_loss"]  # the same rows, before
    assert record["final_train_loss"] == train[-1]["loss"]
    assert record["base_model"] == str(decoder_dir) and record["lr_schedule"] == "wsd" and record["steps"] == 80
    assert record["hardware"]["device"] == "cpu" and record["encoderize"]["tokens"]["mask_token"]


def test_nonfinite_loss_stops_or_skips(decoder_dir, corpus, tmp_path, monkeypatch, capsys):
    from hf_encoderize.training.engine.loss_model import LossModel

    real_forward = LossModel.forward

    def nan_at_step_three(self, *args):
        loss, correct = real_forward(self, *args)
        if not self.training:  # the held-out evaluations (before the first step, at the end) are not steps
            return loss, correct
        self.calls = getattr(self, "calls", 0) + 1
        return (loss * float("nan"), correct) if self.calls == 3 else (loss, correct)

    monkeypatch.setattr(LossModel, "forward", nan_at_step_three)
    with pytest.raises(EncoderizeError, match="non-finite loss or gradient at step 3.*step-0000002"):
        _run(decoder_dir, corpus, tmp_path / "stop", save_every=2)
    assert (tmp_path / "stop" / "checkpoints" / "step-0000002").is_dir()  # the last good checkpoint survives
    summary = _run(decoder_dir, corpus, tmp_path / "skip", on_nonfinite="skip", save_every=6)
    records = [json.loads(line) for line in (tmp_path / "skip" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r.get("skipped_nonfinite")] == [3]
    weights = load_file(tmp_path / "skip" / "encoder" / "model.safetensors")
    assert all(torch.isfinite(t).all() for t in weights.values()) and len(summary["losses"]) == 6


def test_resume_after_kill_equals_unbroken_run(decoder_dir, corpus, tmp_path, monkeypatch):
    _run(decoder_dir, corpus, tmp_path / "unbroken")
    calls = {"n": 0}
    real_step = train_module.train_step

    def dies_at_step_four(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt  # the process dies after the step-3 checkpoint
        return real_step(*args, **kwargs)

    monkeypatch.setattr(train_module, "train_step", dies_at_step_four)
    with pytest.raises(KeyboardInterrupt):
        _run(decoder_dir, corpus, tmp_path / "broken")
    monkeypatch.setattr(train_module, "train_step", real_step)
    assert [p.name for p in (tmp_path / "broken" / "checkpoints").iterdir()] == ["step-0000003"]
    _run(decoder_dir, corpus, tmp_path / "broken", resume=True)
    steps = [json.loads(line)["step"] for line in (tmp_path / "broken" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3, 4, 5, 6, 6]  # 0: the base's eval; the killed run's lines after step 3 are gone; 6
    # twice: train + eval
    unbroken = load_file(tmp_path / "unbroken" / "encoder" / "model.safetensors")
    resumed = load_file(tmp_path / "broken" / "encoder" / "model.safetensors")
    for name, tensor in unbroken.items():
        torch.testing.assert_close(resumed[name], tensor, msg=name)


def test_packer_resumes_token_for_token():
    tokenizer = make_tokenizer()
    documents = [" ".join(f"w{(i * 7 + j) % 100}" for j in range(3 + i % 9)) for i in range(50)]
    whole = list(Packer(tokenizer, 16).rows(iter(documents)))
    first = Packer(tokenizer, 16)
    head = [row for _, row in zip(range(5), first.rows(iter(documents)), strict=False)]
    state = json.loads(json.dumps(first.state))
    tail = list(Packer(tokenizer, 16, state=state).rows(iter(documents)))
    assert head + tail == whole


def test_bad_input_is_one_line(decoder_dir, corpus, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    cases = [
        (["--data-files", str(tmp_path / "none*.jsonl")], "no .txt/.jsonl"),
        (["--data-files", str(corpus), "--text-column", "body"], "text column 'body' not found"),
        (["--data-files", str(corpus), "--mlm-probability", "1.5"], "mlm-probability"),
        (["--data-files", str(corpus), "--max-seq-length", "4096"], "above the model's limit of 64"),
        (["--data-files", str(corpus), "--masking-target", "clm"], "must be one of mlm, mntp, not 'clm'"),
        (["--data-files", str(corpus), "--max-steps", "0"], "--max-steps must be at least 1"),
        (["--data-files", str(corpus), "--report-to", "nosuchtracker"], "unknown tracker"),
        (["--data-files", str(empty)], "has no rows"),
        (["--data-files", str(corpus), "--eval-documents", "400"], "no training documents after the 400"),
    ]
    for extra, message in cases:
        try:
            code = main(["cpt", str(decoder_dir), "--output-dir", str(tmp_path / "o"), *extra])
        except SystemExit as refused:  # a value outside the option's Literal: argparse's choices refuse it
            code = refused.code
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("\n") == 1, err
        assert not (tmp_path / "o").exists()  # a run refused up front leaves nothing behind


def test_lora_trains_adapters_and_mask_row_then_merges(decoder_dir, corpus, tmp_path):
    from hf_encoderize.training.lora import AdapterConfig

    data = DataConfig(data_files=str(corpus), seq_len=32, eval_documents=16)
    train = TrainConfig(output_dir=str(tmp_path / "lora"), steps=4, batch_size=4, lr=1e-2, save_every=4,
                        eval_every=0)
    adapter = AdapterConfig(lora_r=4, lora_alpha=8, save_adapter=True)
    cpt(LoadConfig(str(decoder_dir)), data, MaskingConfig(), train, adapter)
    encoder = load_file(tmp_path / "lora" / "encoder" / "model.safetensors")
    assert not any("lora" in name for name in encoder)  # merged: a plain model
    assert (tmp_path / "lora" / "adapter" / "adapter_config.json").exists()
    original = load_file(decoder_dir / "model.safetensors")
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(encoder[name], original[name])  # the merged adapter changed the weights
    embeddings, trained = encoder["model.embed_tokens.weight"], original["model.embed_tokens.weight"]
    mask_id = embeddings.shape[0] - 1  # `<mask>` was added as the last row, pad before it
    torch.testing.assert_close(embeddings[:mask_id - 1], trained[:mask_id - 1])  # frozen rows are untouched
    # The mask row started at the mean of the trained rows (tokens.py) and trained: it moved away from it.
    assert (embeddings[mask_id] - trained.mean(dim=0)).abs().max() > 1e-3


def test_qlora_without_gpu_is_one_line(decoder_dir, corpus, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code = main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(tmp_path / "q"),
                 "--max-seq-length", "32", "--lora-r", "8", "--load-in-4bit"])
    err = capsys.readouterr().err
    assert code == 2 and ("GPU" in err or "bitsandbytes" in err) and err.count("\n") == 1


def test_shipped_accelerate_configs_parse():
    from pathlib import Path

    from accelerate.commands.config.config_args import load_config_from_file

    folder = Path(__file__).resolve().parents[1] / "hf_encoderize" / "configs" / "accelerate"
    configs = sorted(folder.glob("*.yaml"))
    assert len(configs) == 6
    for path in configs:
        config = load_config_from_file(str(path))
        assert config.mixed_precision == "bf16" and config.num_processes >= 1, path.name


def test_mlm_to_mlm_on_a_native_encoder(corpus, tmp_path):
    # The paper's baseline (section 5): continue MLM on an MLM-pretrained encoder, saved with no remote code.
    from transformers import AutoModelForMaskedLM, BertConfig, BertForMaskedLM

    source = tmp_path / "tiny-bert"
    tokenizer = make_tokenizer()
    tokenizer.add_special_tokens({"mask_token": "[MASK]", "pad_token": "[PAD]"})
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    BertForMaskedLM(config).save_pretrained(source)
    tokenizer.save_pretrained(source)
    data = DataConfig(data_files=str(corpus), seq_len=32, eval_documents=16)
    train = TrainConfig(output_dir=str(tmp_path / "bert-run"), steps=30, batch_size=4, lr=3e-3, save_every=30,
                        eval_every=0)
    summary = cpt(LoadConfig(str(source)), data, MaskingConfig(), train)
    assert sum(summary["losses"][-5:]) < sum(summary["losses"][:5])
    saved = tmp_path / "bert-run" / "encoder"
    assert not (saved / "modeling_encoderize.py").exists()
    assert "auto_map" not in json.loads((saved / "config.json").read_text())
    assert type(AutoModelForMaskedLM.from_pretrained(saved)).__name__ == "BertForMaskedLM"


def test_fp16_weights_trained_as_loaded_under_the_fp16_scaler_are_refused(corpus, tmp_path, monkeypatch, capsys):
    """On a GPU, fp16 autocast brings a loss scaler that refuses to unscale fp16 gradients, so fp16 weights trained as
    loaded (--master-weights loaded) would fail at the first step; refused in one line before the output folder is
    touched. The CPU has no scaler (and refuses fp16), so the test gives the accelerator the one a GPU would have."""
    import hf_encoderize.common.precision as precision
    import hf_encoderize.training.runner as runner

    model_dir = tmp_path / "fp16-decoder"
    make_decoder().half().save_pretrained(model_dir)
    make_tokenizer().save_pretrained(model_dir)
    real = runner.make_accelerator

    def with_scaler(*args, **kwargs):
        accelerator = real(*args, **kwargs)
        accelerator.scaler = torch.amp.GradScaler("cpu")
        return accelerator

    monkeypatch.setattr(runner, "make_accelerator", with_scaler)
    monkeypatch.setattr(precision, "fp16_device", lambda: True)
    code = main(["cpt", str(model_dir), "--data-files", str(corpus), "--output-dir", str(tmp_path / "o"),
                 "--mixed-precision", "fp16", "--master-weights", "loaded", "--max-seq-length", "32", "--max-steps",
                 "1"])
    err = capsys.readouterr().err
    # The refusal comes after the load (the weights' dtype is known then): its progress bar may precede the line.
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("error: --mixed-precision fp16 with --master-weights loaded"), err
    assert not (tmp_path / "o").exists()
    summary = _run(model_dir, corpus, tmp_path / "fp32-master", steps=1, mixed_precision="fp16")  # the default: fine
    assert len(summary["losses"]) == 1


def test_qlora_of_a_gguf_file_is_one_line_before_any_work(corpus, tmp_path, capsys):
    """transformers refuses to quantise de-quantised GGUF weights; that refusal read as a corrupt GGUF file, after
    the load. It is now one line saying what to do, before the file is even opened."""
    code = main(["cpt", str(tmp_path), "--gguf-file", "model.gguf", "--data-files", str(corpus), "--output-dir",
                 str(tmp_path / "q"), "--lora-r", "8", "--load-in-4bit"])
    err = capsys.readouterr().err
    assert code == 2 and "--load-in-4bit cannot quantise a GGUF file" in err and err.count("\n") == 1, err
    assert not (tmp_path / "q").exists()


def test_a_lora_target_typo_is_refused_before_the_load(decoder_dir, corpus, tmp_path, capsys, monkeypatch):
    """The skeleton (config on the meta device) names the modules: a typo costs no weight load and no output folder."""
    import hf_encoderize.recipes.cpt as cpt_recipe

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before --lora-targets was checked")

    monkeypatch.setattr(cpt_recipe, "load_encoderized", no_load)
    out = tmp_path / "o"
    code = main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(out), "--max-seq-length",
                 "32",
                 "--lora-r", "4", "--lora-targets", "q_proj,v_prj"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --lora-targets") and "'v_prj'" in err and "q_proj" in err, err
    assert err.count("\n") == 1 and not out.exists()
