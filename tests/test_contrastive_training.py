"""The contrastive stage trains like cpt: resume equals an unbroken run, LoRA merged on save, several processes through
the same launchers (torchrun / accelerate, gloo on CPU), and an interrupted run is never silently restarted."""

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import contrastive_config, interrupt_at_step
from safetensors.torch import load_file

from hf_encoderize.cli import main
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.recipes.contrastive import contrastive, work_dir
from hf_encoderize.training.lora import AdapterConfig

_config = contrastive_config


def _weights(folder):
    return load_file(folder / "model.safetensors")


def test_resume_after_interrupt_equals_unbroken_run(encoder, text, tmp_path):
    contrastive(_config(encoder, text, tmp_path / "unbroken"))
    out = tmp_path / "broken"
    with interrupt_at_step(5), pytest.raises(KeyboardInterrupt, match="--resume"):  # after the step-4 checkpoint
        contrastive(_config(encoder, text, out))
    assert not out.exists() and sorted(p.name for p in (work_dir(out) / "trainer").iterdir()) == [
        "checkpoint-2", "checkpoint-4"]
    with pytest.raises(EncoderizeError, match="interrupted contrastive run; pass --resume"):
        contrastive(_config(encoder, text, out))  # a fresh start would throw the checkpoints away
    with pytest.raises(EncoderizeError, match="learning_rate was 3e-05, now 0.001"):
        contrastive(_config(encoder, text, out, resume=True, learning_rate=1e-3))
    contrastive(_config(encoder, text, out, resume=True))
    unbroken, resumed = _weights(tmp_path / "unbroken"), _weights(out)
    for name, tensor in unbroken.items():
        torch.testing.assert_close(resumed[name], tensor, msg=name)
    assert not work_dir(out).exists()  # checkpoints go once the model is written
    record = json.loads((out / "contrastive_run.json").read_text())
    assert [m["step"] for m in record["metrics"] if "loss" in m][-1] == 6


def test_resume_without_a_run_is_one_line(encoder, text, tmp_path, capsys):
    code = main(["contrastive", str(encoder), "--data-files", str(text), "--output-dir", str(tmp_path / "x"),
                 "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --resume: no checkpoint") and err.count("\n") == 1


def test_lora_adapters_are_merged_on_save(encoder, text, tmp_path):
    from transformers import AutoModel

    out = tmp_path / "lora"
    contrastive(_config(encoder, text, out, learning_rate=1e-2), AdapterConfig(lora_r=4, save_adapter=True))
    merged = _weights(out)
    assert not any("lora" in name for name in merged)  # a plain model: adapters folded into the weights
    source = _weights(encoder)
    changed = [n for n, t in merged.items() if f"model.{n}" in source and not torch.equal(t, source[f"model.{n}"])]
    assert any("q_proj" in n for n in changed) and not any("embed_tokens" in n for n in changed)  # only adapted ones
    assert (out / "adapter" / "adapter_config.json").is_file()
    model = AutoModel.from_pretrained(out).eval()
    assert model.config.is_causal is False
    stage = json.loads((out / "contrastive_run.json").read_text())["stage"]
    assert stage["lora"] == {"r": 4, "alpha": 16, "targets": "all-linear", "merged": True}


def test_lora_run_resumes(encoder, text, tmp_path):
    adapter = AdapterConfig(lora_r=4)
    contrastive(_config(encoder, text, tmp_path / "unbroken", learning_rate=1e-2), adapter)
    with interrupt_at_step(3), pytest.raises(KeyboardInterrupt):
        contrastive(_config(encoder, text, tmp_path / "broken", learning_rate=1e-2), adapter)
    contrastive(_config(encoder, text, tmp_path / "broken", learning_rate=1e-2, resume=True), adapter)
    unbroken, resumed = _weights(tmp_path / "unbroken"), _weights(tmp_path / "broken")
    for name, tensor in unbroken.items():
        torch.testing.assert_close(resumed[name], tensor, msg=name)


def test_two_processes_train_with_cross_device_negatives(encoder, text, tmp_path):
    """torchrun with 2 CPU processes (gloo): one output folder, written once, that loads; the record says 2."""
    out = tmp_path / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(29900 + os.getpid() % 90), "-m", "hf_encoderize.cli", "contrastive", str(encoder), "--data-files",
               str(text), "--output-dir", str(out), "--max-steps", "2", "--batch-size", "4", "--max-seq-length", "16",
               "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    stage = json.loads((out / "contrastive_run.json").read_text())["stage"]
    assert stage["processes"] == 2 and stage["steps"] == 2
    from sentence_transformers import SentenceTransformer

    embeddings = SentenceTransformer(str(out), device="cpu").encode(["w1 w2", "w3 w4"])
    assert embeddings.shape == (2, 32) and not work_dir(out).exists()


def test_lead_token_is_the_default_prompt(encoder, text, tmp_path):
    """`SentenceTransformer(out).encode(t)` = mean of plain `AutoModel` hidden states over positions 1.. of
    EOS EOS t: no word of t sits at position 0, the attention sink of a causally pretrained model."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    out = tmp_path / "lead"
    contrastive(_config(encoder, text, out, steps=2))
    model = SentenceTransformer(str(out), device="cpu")
    assert model.prompts["text"] == "</s></s>" and model.default_prompt_name == "text"
    tokenizer, plain = AutoTokenizer.from_pretrained(out), AutoModel.from_pretrained(out).eval()
    for sentence in ("w5", "w7 w8 w9"):
        ids = tokenizer("</s></s>" + sentence, return_tensors="pt")["input_ids"]
        assert ids[0, :2].tolist() == [tokenizer.eos_token_id] * 2
        with torch.no_grad():
            expected = plain(input_ids=ids).last_hidden_state[0, 1:].mean(0)
        torch.testing.assert_close(torch.as_tensor(model.encode(sentence)), expected, atol=1e-5, rtol=1e-4)
    off = tmp_path / "no-lead"
    contrastive(_config(encoder, text, off, steps=2, lead_token=False))
    assert SentenceTransformer(str(off), device="cpu").default_prompt_name is None
