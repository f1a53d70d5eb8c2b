"""What the launchers need from the engine, checked on CPU: FSDP2's wrap policy and weight re-tying see through the
objective wrapper, and a bf16 checkpoint trains with fp32 master weights."""

import json
import tempfile

import pytest
import torch
from conftest import make_decoder, make_tokenizer

from hf_encoderize.data.sources import DataConfig, open_documents
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.objectives.targets import MaskedTokens
from hf_encoderize.recipes.cpt import load_encoderized
from hf_encoderize.training.engine.accelerator import make_accelerator
from hf_encoderize.training.engine.build import Trainable, build_run
from hf_encoderize.training.engine.loop import train_step
from hf_encoderize.training.engine.loss_model import LossModel
from hf_encoderize.training.lora import AdapterConfig
from hf_encoderize.training.train_config import TrainConfig


def test_fsdp2_wraps_each_layer_and_keeps_the_head_tied():
    """accelerate's own FSDP2 code on the wrapper: the transformer policy finds the decoder layers (it reads
    `_no_split_modules` off the prepared object), and `cpu_ram_efficient_loading`'s move to meta followed by its
    `tie_weights` call leaves one shared embedding/LM-head tensor, which accelerate then puts in one FSDP unit."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy

    wrapped = LossModel(make_decoder(tie_word_embeddings=True))
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap")
    plugin.set_auto_wrap_policy(wrapped)
    policy = fsdp2_prepare_auto_wrap_policy(plugin, wrapped)
    assert [type(m).__name__ for m in wrapped.modules() if policy(m)] == ["LlamaDecoderLayer"] * 2
    wrapped = wrapped.to(torch.device("meta"))  # what accelerate does with cpu_ram_efficient_loading, then:
    if hasattr(wrapped, "tie_weights"):
        wrapped.tie_weights()
    assert wrapped.get_input_embeddings().weight is wrapped.get_output_embeddings().weight
    assert set(wrapped._tied_weights_keys) == {"model.lm_head.weight"}


@pytest.fixture(scope="module")
def bf16_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models") / "tiny-bf16"
    make_decoder().to(torch.bfloat16).save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    corpus = folder.parent / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"text": " ".join(f"w{(i * 7 + j) % 100}" for j in range(5 + i % 9))}) + "\n"
                              for i in range(120)))
    return folder, corpus


def _one_step(folder, corpus, out, master_weights: str):
    data = DataConfig(data_files=str(corpus), seq_len=32, eval_documents=4)
    train = TrainConfig(output_dir=str(out), steps=100, batch_size=4, lr=1e-5, warmup_steps=1, progress=False,
                        master_weights=master_weights)
    model, tokenizer, _ = load_encoderized(LoadConfig(str(folder)), data, train, AdapterConfig())
    assert model.dtype == torch.bfloat16  # dtype auto keeps the checkpoint's bf16
    model.train()
    run = build_run(make_accelerator(train, out, []), Trainable(model=model, tokenizer=tokenizer, data=data),
                    open_documents(data), MaskedTokens(MaskingConfig()), train, out)
    before = {name: p.detach().float().clone() for name, p in model.named_parameters()}
    train_step(run)
    weights = dict(model.named_parameters())
    moved = sum(int((weights[name].detach().float() != value).sum()) for name, value in before.items())
    return model, moved / sum(value.numel() for value in before.values())


def test_bf16_checkpoint_trains_with_fp32_master_weights(bf16_model, tmp_path):
    """At lr 1e-5 AdamW moves each weight by about 1e-5 (plus weight decay lr * 0.1 * w): below bf16's resolution
    for typical weights, so pure-bf16 training loses almost every update; fp32 master weights keep them all."""
    folder, corpus = bf16_model
    model, moved = _one_step(folder, corpus, tmp_path / "fp32", "fp32")
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert moved > 0.99, moved
    model, moved_bf16 = _one_step(folder, corpus, tmp_path / "loaded", "loaded")
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert moved_bf16 < 0.5, moved_bf16  # what `--master-weights loaded` costs, measured


def test_probe_runs_where_and_how_the_model_trains(bf16_model, tmp_path, monkeypatch):
    """The bidirectionality probe runs on the training device under the run's autocast (a flash-attention kernel
    cannot run on CPU tensors or in fp32): on this CPU, bf16 mixed precision means CPU autocast in bf16."""
    import hf_encoderize.model.bidirectional as bidirectional

    folder, corpus = bf16_model
    seen, real = [], bidirectional.verify_bidirectional

    def spy(model, **kwargs):
        seen.append((next(model.parameters()).device.type, torch.is_autocast_enabled("cpu"),
                     torch.get_autocast_dtype("cpu")))
        return real(model, **kwargs)

    monkeypatch.setattr(bidirectional, "verify_bidirectional", spy)
    data = DataConfig(data_files=str(corpus), seq_len=32, eval_documents=4)
    train = TrainConfig(output_dir=str(tmp_path / "run"), steps=2, batch_size=4, mixed_precision="bf16",
                        progress=False)
    from hf_encoderize.recipes.cpt import cpt

    cpt(LoadConfig(str(folder)), data, MaskingConfig(), train)
    assert seen == [("cpu", True, torch.bfloat16)]


def _train_losses(out) -> list[float]:
    records = map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
    return [r["loss"] for r in records if r["kind"] == "train"]


@pytest.mark.skipif(__import__("importlib").util.find_spec("deepspeed") is None,
                    reason="deepspeed is not installed (pip install 'hf-encoderize[deepspeed]'); gpu_check runs it")
@pytest.mark.parametrize("config", ["deepspeed_zero2.yaml", "deepspeed_zero3.yaml"])
def test_deepspeed_runs_the_shipped_config(config, bf16_model, tmp_path):
    """The shipped ZeRO-2/3 configs run the cpt loop under `accelerate launch` (DeepSpeed's CPU accelerator, one
    process): the `auto` batch values are filled (accelerate would raise at `prepare`), ZeRO-3's zero.Init weights are
    gathered for the probe and for saving, the losses equal a plain run's, and the encoder loads outside our package."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    folder, corpus = bf16_model
    root = Path(__file__).resolve().parents[1]
    args = ["cpt", str(folder), "--data-files", str(corpus), "--max-seq-length", "32", "--batch-size", "4",
            "--max-steps", "3",
            "--save-steps", "3", "--eval-steps", "0", "--no-progress", "--mixed-precision", "no"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    shipped = root / "hf_encoderize" / "configs" / "accelerate" / config  # package data: `accelerate-config NAME`
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(shipped), "--num_processes", "1",
              "--mixed_precision", "no", "-m", "hf_encoderize.cli"]
    for command, out in ((launch, tmp_path / "ds"), ([sys.executable, "-m", "hf_encoderize.cli"], tmp_path / "plain")):
        done = subprocess.run([*command, *args, "--output-dir", str(out)], capture_output=True, text=True, env=env,
                              timeout=600, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "ds" / "run_record.json").read_text())
    assert record["hardware"]["distributed_type"] == "DEEPSPEED"
    # fp32 compute either way; ZeRO-3 reduces in another order (3e-5 measured)
    assert _train_losses(tmp_path / "ds") == pytest.approx(_train_losses(tmp_path / "plain"), abs=1e-4)
    clean_check = [sys.executable, str(root / "tests" / "clean_env_check.py"), str(tmp_path / "ds" / "encoder")]
    check = subprocess.run(clean_check, capture_output=True, text=True, timeout=300, env=env)
    report = json.loads(check.stdout.strip().splitlines()[-1])
    assert report["is_causal"] is False and report["later_token_changes_first"]
    assert not report["hf_encoderize_importable"]


def test_an_fsdp2_gradient_norm_is_reduced_as_a_plain_tensor():
    """Under FSDP2, `clip_grad_norm_` over sharded parameters returns a replicated DTensor, and the step's
    `accelerator.reduce` of it failed on an H200 ("c10d.allreduce_.default does not have a sharding strategy
    registered"). The same happens here with gloo and one process; `plain_norm` gives the full value as a tensor."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from hf_encoderize.training.nonfinite import plain_norm

    if dist.is_initialized():
        pytest.skip("a process group is already up in this process")
    dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/rendezvous", rank=0, world_size=1)
    try:
        layer = torch.nn.Linear(4, 4)
        fully_shard(layer, mesh=init_device_mesh("cpu", (1,)))
        layer(torch.randn(2, 4)).sum().backward()
        norm = torch.nn.utils.clip_grad_norm_(layer.parameters(), 1.0)
        with pytest.raises(NotImplementedError, match="sharding strategy"):
            dist.all_reduce(norm.clone())  # what the engine did before
        plain = plain_norm(norm)
        assert type(plain) is torch.Tensor and float(plain) == pytest.approx(float(norm.full_tensor()))
        dist.all_reduce(plain)
        already = torch.tensor(3.0)
        assert plain_norm(already) is already and plain_norm(2.5) == 2.5  # anything else is left as it is
    finally:
        dist.destroy_process_group()
