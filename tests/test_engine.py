"""The training engine, TRL/torchtitan style: invariance to how the global batch is split, every trainable parameter
moves, and a committed reference loss curve that a refactor must reproduce."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import make_decoder, make_tokenizer, on_meta_default, write_corpus
from safetensors.torch import load_file

from hf_encoderize.data.sources import DataConfig, open_documents
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.objectives.targets import MaskedTokens
from hf_encoderize.recipes.cpt import cpt, load_encoderized
from hf_encoderize.training.engine.accelerator import make_accelerator
from hf_encoderize.training.engine.build import Trainable, build_run
from hf_encoderize.training.engine.loop import train_step
from hf_encoderize.training.lora import AdapterConfig, apply_lora
from hf_encoderize.training.train_config import TrainConfig

HERE = Path(__file__).parent
REFERENCE = HERE / "data" / "reference_loss_curve.json"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    # Documents of uneven length, so micro-batches and processes hold unequal numbers of masked tokens.
    return write_corpus(tmp_path_factory.mktemp("data") / "docs.jsonl", 300, lambda i: 3 + i % 23)


def _launch(decoder_dir, corpus, out: Path, processes: int, batch_size: int, grad_accum: int, **env):
    losses = out.with_suffix(".json")
    script = HERE / "scripts" / "ddp_cpt.py"
    args = [str(script), str(decoder_dir), str(corpus), str(out), str(losses), str(batch_size), str(grad_accum)]
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_port",
                str(29400 + os.getpid() % 500)] if processes > 1 else []
    env = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    done = subprocess.run([sys.executable, *launcher, *args], capture_output=True, text=True, timeout=600, env=env)
    if env.get("HIDE_SHARED_FOLDER_FROM_RANK"):
        return done
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(losses.read_text())


def test_a_run_folder_not_shared_by_every_process_is_refused(decoder_dir, corpus, tmp_path):
    """Several machines need one shared run folder (checkpoints hold files from the main process and from every
    rank, and resume needs all of them): a rank that cannot see the main process's files stops the run at start-up,
    before any training, with one line saying what is needed."""
    done = _launch(decoder_dir, corpus, tmp_path / "run", 2, 4, 1, HIDE_SHARED_FOLDER_FROM_RANK="1")
    assert done.returncode != 0
    assert "1 of 2 processes cannot see" in done.stderr and "filesystem they all share" in done.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_global_batch_split_does_not_change_training(decoder_dir, corpus, tmp_path):
    """1 process x 8 rows == 1 process x 1 row x 8 accumulation steps == 2 processes (gloo) x 4 rows: same per-step
    losses and the same weights after 5 steps. The loss is normalised by the labelled tokens of the whole global
    batch, so micro-batches and processes with unequal masked-token counts weigh them exactly as one batch would."""
    runs = {"8x1": (1, 8, 1), "1x8 accumulated": (1, 1, 8), "2 processes x 4": (2, 4, 1)}
    losses, weights = {}, {}
    for name, (processes, batch_size, grad_accum) in runs.items():
        out = tmp_path / name.replace(" ", "_")
        losses[name] = _launch(decoder_dir, corpus, out, processes, batch_size, grad_accum)
        weights[name] = load_file(out / "encoder" / "model.safetensors")
        for rank in range(processes):  # no process returned from cpt before the encoder was on disk
            assert json.loads(Path(f"{out}.json.rank{rank}").read_text()) == {"encoder_saved": True}, (name, rank)
    reference = torch.tensor(losses["8x1"])
    assert len(reference) == 5 and reference[-1] < reference[0]
    for name in ("1x8 accumulated", "2 processes x 4"):
        torch.testing.assert_close(torch.tensor(losses[name]), reference, atol=1e-5, rtol=1e-5, msg=name)
        for key, tensor in weights["8x1"].items():
            torch.testing.assert_close(weights[name][key], tensor, atol=1e-5, rtol=1e-4, msg=f"{name}: {key}")


def _engine(decoder_dir, corpus, out: Path, adapter: AdapterConfig | None = None):
    """A run built from the engine's public calls, as the recipes build it (weight decay 0, so only gradients move
    weights)."""
    data = DataConfig(data_files=str(corpus), seq_len=32, eval_documents=8)
    train = TrainConfig(output_dir=str(out), steps=10, batch_size=4, lr=1e-2, warmup_steps=1, weight_decay=0.0,
                        progress=False)
    adapter = adapter or AdapterConfig()
    model, tokenizer, _ = load_encoderized(LoadConfig(str(decoder_dir)), data, train, adapter)
    if adapter.lora_r:
        apply_lora(model, adapter, tokenizer.mask_token_id)
    model.train()
    run = build_run(make_accelerator(train, out, []), Trainable(model=model, tokenizer=tokenizer, data=data),
                    open_documents(data), MaskedTokens(MaskingConfig()), train, out)
    return run, model, tokenizer


def _changed(model, before: dict) -> dict[str, bool]:
    return {name: not torch.equal(p.detach(), before[name]) for name, p in model.named_parameters()}


def test_one_step_changes_every_trainable_parameter(decoder_dir, corpus, tmp_path):
    run, model, _ = _engine(decoder_dir, corpus, tmp_path / "full")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    assert all(p.requires_grad for p in model.parameters())
    train_step(run)
    changed = _changed(model, before)
    assert all(changed.values()), [name for name, moved in changed.items() if not moved]


def test_lora_trains_only_the_adapters_and_the_mask_row(decoder_dir, corpus, tmp_path):
    run, model, tokenizer = _engine(decoder_dir, corpus, tmp_path / "lora", AdapterConfig(lora_r=4, lora_alpha=8))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name or "trainable_tokens" in name for name in trainable), trainable
    embeddings = model.get_input_embeddings()
    rows_before = embeddings(torch.arange(len(tokenizer))).detach().clone()
    for _ in range(2):  # lora_B starts at zero, so lora_A's first gradient is zero: two steps move both
        train_step(run)
    changed = _changed(model, before)
    assert all(changed[name] for name in trainable), [n for n in trainable if not changed[n]]
    assert not any(changed[name] for name in changed if name not in trainable)
    # Of the embedding rows, exactly the mask token's moved (peft's trainable_token_indices).
    rows_after = embeddings(torch.arange(len(tokenizer))).detach()
    moved = (rows_after != rows_before).any(dim=1).nonzero().flatten().tolist()
    assert moved == [tokenizer.mask_token_id]


def reference_curve(decoder_dir, corpus, out: Path) -> list[float]:
    """20 steps of cpt of the tiny Llama on the fixed corpus, seed 0."""
    data = DataConfig(data_files=str(corpus), seq_len=32, eval_documents=8)
    train = TrainConfig(output_dir=str(out), steps=20, batch_size=4, grad_accum=2, lr=3e-3, save_every=20,
                        eval_every=0, progress=False)
    return cpt(LoadConfig(str(decoder_dir)), data, MaskingConfig(), train)["losses"]


def test_reference_loss_curve(decoder_dir, corpus, tmp_path):
    """A refactor that silently changes training (data order, masking, loss, schedule, optimizer) fails here.
    After an intended change, regenerate with: REGENERATE_REFERENCE=1 pytest tests/test_engine.py -k reference."""
    losses = reference_curve(decoder_dir, corpus, tmp_path / "reference")
    if os.environ.get("REGENERATE_REFERENCE") == "1":
        REFERENCE.parent.mkdir(exist_ok=True)
        REFERENCE.write_text(json.dumps({"steps": 20, "losses": losses}, indent=1) + "\n")
        pytest.skip(f"wrote {REFERENCE}")
    expected = json.loads(REFERENCE.read_text())["losses"]
    assert len(losses) == len(expected) == 20
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), atol=1e-4, rtol=1e-4)


def _engine_with(decoder_dir, corpus, out: Path, transposed: bool):
    """`_engine`, with the first q_proj weight stored transposed (same values, non-contiguous strides) if asked."""
    data = DataConfig(data_files=str(corpus), seq_len=32, eval_documents=8)
    train = TrainConfig(output_dir=str(out), steps=10, batch_size=4, lr=1e-2, warmup_steps=1, progress=False)
    model, tokenizer, _ = load_encoderized(LoadConfig(str(decoder_dir)), data, train, AdapterConfig())
    if transposed:
        proj = model.model.layers[0].self_attn.q_proj
        proj.weight = torch.nn.Parameter(proj.weight.detach().t().contiguous().t())
        assert not proj.weight.is_contiguous()
    model.train()
    run = build_run(make_accelerator(train, out, []), Trainable(model=model, tokenizer=tokenizer, data=data),
                    open_documents(data), MaskedTokens(MaskingConfig()), train, out)
    return run, model


def test_fused_adamw_on_cpu_trains_a_non_contiguous_parameter_right(decoder_dir, corpus, tmp_path):
    """torch's fused CPU AdamW mis-updates a parameter whose gradient has other strides than it (0.0098 off after 5
    steps for a transposed view with a contiguous gradient, torch 2.13). The engine makes every parameter contiguous
    before building the optimizer, so a transposed-stored weight trains exactly as its contiguous copy does."""
    runs = {kind: _engine_with(decoder_dir, corpus, tmp_path / kind, kind == "transposed")
            for kind in ("plain", "transposed")}
    assert all(run.optimizer.optimizer.defaults["fused"] for run, _ in runs.values())
    assert all(p.is_contiguous() for p in runs["transposed"][1].parameters())
    for _ in range(3):
        for run, _ in runs.values():
            train_step(run)
    plain, transposed = (dict(model.named_parameters()) for _, model in runs.values())
    for name, parameter in plain.items():
        torch.testing.assert_close(transposed[name], parameter, rtol=0, atol=1e-6, msg=name)


def test_clipping_folded_into_the_fused_step_trains_as_clip_grad_norm_does(decoder_dir, corpus, tmp_path):
    """On a GPU process with fused AdamW, clipping rides on the optimizer step (`loop.clip_gradients`: the fused kernel
    divides each gradient by 1 / coefficient) instead of a pass that scales every gradient first. At a max norm the
    gradients exceed (so the clip acts on every step), the weights after 4 steps equal those of accelerate's
    `clip_grad_norm_` then the step, to float rounding, and the recorded norms are the same."""
    runs = {}
    for fold in (True, False):
        run, model = _engine_with(decoder_dir, corpus, tmp_path / f"fold-{fold}", transposed=False)
        assert not run.fold_clip  # folded on a GPU only; on the CPU the kernel's arithmetic is tested by asking for it
        run.fold_clip = fold
        run.train = type(run.train)(**{**run.train.__dict__, "max_grad_norm": 0.05})
        norms = [float(train_step(run)["totals"][2]) for _ in range(4)]
        runs[fold] = (dict(model.named_parameters()), norms)
    (folded, folded_norms), (plain, plain_norms) = runs[True], runs[False]
    assert min(plain_norms) > 0.05  # the clip acted on every step
    torch.testing.assert_close(torch.tensor(folded_norms), torch.tensor(plain_norms), rtol=1e-5, atol=0)
    for name, parameter in plain.items():
        torch.testing.assert_close(folded[name], parameter, rtol=0, atol=1e-6, msg=name)


def test_step_times_include_the_wait_for_the_device(tmp_path, monkeypatch):
    """The host runs ahead of a GPU, so a step's host time is only its queueing time; the sync at a flush waits for
    the device to finish the pending steps, and that wait is theirs. Here reading the figures takes 0.3 s (a device
    finishing its queue): the steps' times must add up to the wall time, wait included."""
    import time
    from types import SimpleNamespace

    from hf_encoderize.training.monitor import TrainingMonitor

    to_host = torch.Tensor.cpu

    def device_finishing(tensor, *args, **kwargs):
        time.sleep(0.3)
        return to_host(tensor, *args, **kwargs)

    monitor = TrainingMonitor(SimpleNamespace(is_main_process=True, log=lambda *a, **k: None), tmp_path, 4,
                              show=False, log_every=4)
    monkeypatch.setattr(torch.Tensor, "cpu", device_finishing)
    for step in range(1, 5):
        records = monitor.step(step, lr=1e-3, totals=torch.tensor([2.0, 1.0, 0.5]), counts=torch.tensor([4.0, 8.0]),
                               processes=1)
    elapsed = time.perf_counter() - monitor.started
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert sum(r["step_time_s"] for r in records) == pytest.approx(elapsed, abs=0.05)


def test_training_never_builds_a_tensor_on_the_default_device(corpus, tmp_path, monkeypatch):
    """On a GPU the model's device is not the default one (the CPU), which CPU tests cannot see: a device tensor built
    without naming the device lands on the CPU and the step fails there (the probe's pads did, on every GPU run).
    Here the default device is meta while the model trains on the CPU: every device tensor must follow the model or
    the accelerator, every host tensor must name the CPU, and the run must equal the same run without the meta
    default. The prefetch thread keeps the CPU default (the mode is per thread), as host preparation does on a GPU."""
    model_dir = tmp_path / "model"
    make_decoder().save_pretrained(model_dir)
    make_tokenizer().save_pretrained(model_dir)

    def run(name):
        return cpt(LoadConfig(str(model_dir), attn_implementation="sdpa"),
                   DataConfig(data_files=str(corpus), seq_len=32, eval_documents=8), MaskingConfig(),
                   TrainConfig(output_dir=str(tmp_path / name), steps=4, batch_size=4, save_every=2, eval_every=2,
                               log_every=2, progress=False))

    reference = run("reference")
    from hf_encoderize.model import where_it_trains

    probe = where_it_trains.probe_where_it_trains
    monkeypatch.setattr(where_it_trains, "probe_where_it_trains", on_meta_default(probe))
    import hf_encoderize.training.runner as runner

    monkeypatch.setattr(runner, "train_phases", on_meta_default(runner.train_phases))
    monkeypatch.setattr(runner, "evaluate_held_out", on_meta_default(runner.evaluate_held_out))
    emulated = run("meta-default")
    assert emulated["losses"] == reference["losses"]
    assert emulated["eval_loss"] == reference["eval_loss"]


def test_processes_wait_hours_not_minutes_for_the_main_one_to_save(tmp_path):
    """While the main process saves (a LoRA merge reloads the whole base; FSDP gathers its shards) the others wait at
    a barrier; NCCL's default 10-minute timeout would abort them all mid-save for a large model."""
    import datetime

    from hf_encoderize.training.engine.accelerator import make_accelerator

    accelerator = make_accelerator(TrainConfig(output_dir=str(tmp_path)), tmp_path, [])
    assert accelerator.init_handler.timeout == datetime.timedelta(hours=2)
