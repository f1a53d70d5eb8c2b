"""QLoRA's merge: adapters go into a full-precision reload of the base, and the result is a plain model.

No GPU or bitsandbytes here: the adapters are trained in full precision; `merge_full_precision` only reads the saved
adapter folder, which is the same whether the base was 4-bit or not.
"""

import json
import subprocess
import sys

import pytest
import torch
from conftest import make_decoder, make_tokenizer
from safetensors.torch import load_file

from hf_encoderize.data.sources import DataConfig
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.model.tokens import ensure_special_tokens
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.recipes.cpt import cpt
from hf_encoderize.training.lora import AdapterConfig, apply_lora, merge_full_precision
from hf_encoderize.training.train_config import TrainConfig


@pytest.fixture(scope="module")
def lora_run(decoder_dir, tmp_path_factory):
    """A 3-step LoRA cpt run that kept its adapter: OUT/adapter and the fp32 merged OUT/encoder."""
    root = tmp_path_factory.mktemp("qlora")
    generator = torch.Generator().manual_seed(0)
    with (root / "docs.jsonl").open("w") as handle:
        for i in range(120):
            start = torch.randint(0, 60, (1,), generator=generator).item()
            handle.write(json.dumps({"text": " ".join(f"w{start + j}" for j in range(6 + i % 12))}) + "\n")
    data = DataConfig(data_files=str(root / "docs.jsonl"), seq_len=32, eval_documents=0)
    train = TrainConfig(output_dir=str(root / "run"), steps=3, batch_size=4, lr=1e-2, save_every=3, eval_every=0)
    cpt(LoadConfig(str(decoder_dir)), data, MaskingConfig(), train, AdapterConfig(lora_r=4, lora_alpha=8,
                                                                                   save_adapter=True))
    return root / "run"


@pytest.fixture(scope="module")
def merged(lora_run, decoder_dir):
    return merge_full_precision(lora_run / "adapter", LoadConfig(str(decoder_dir)), dtype=torch.bfloat16)


def test_merge_is_a_plain_bf16_transformers_model(merged):
    model, tokenizer = merged
    assert type(model).__module__.startswith("transformers.")
    assert {type(module).__module__.split(".")[0] for module in model.modules()} <= {"transformers", "torch"}
    assert all(type(p) is torch.nn.Parameter and p.dtype == torch.bfloat16 for p in model.parameters())
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert getattr(model.config, "quantization_config", None) is None and model.config.is_causal is False
    assert tokenizer.mask_token is not None and tokenizer.mask_token_id < model.config.vocab_size


def test_merge_reproduces_the_trained_encoder(merged, lora_run, decoder_dir):
    model, tokenizer = merged
    trained = load_file(lora_run / "encoder" / "model.safetensors")  # cpt's own fp32 merge
    head = lora_run / "encoder" / "lm_head.safetensors"  # an untied MLM head is saved beside it (model/head_file.py)
    if head.is_file():
        trained.update(load_file(head))
    weights = {name: tensor.float() for name, tensor in model.state_dict().items()}
    assert weights.keys() == trained.keys()
    for name, tensor in trained.items():  # bf16 keeps 8 bits of mantissa: a relative error of 2^-8 per weight
        torch.testing.assert_close(weights[name], tensor, rtol=1.6e-2, atol=1e-2 * tensor.abs().max().item())
    # The adapters moved the weights by far more than bf16 rounding, so the comparison above means something.
    base = load_file(decoder_dir / "model.safetensors")["model.layers.0.self_attn.q_proj.weight"]
    name = "model.layers.0.self_attn.q_proj.weight"
    assert (weights[name] - trained[name]).abs().max() < 0.2 * (base - trained[name]).abs().max()
    # The mask token's row (peft's `trainable_token_indices`) is the trained one, not the fresh mean-initialised row.
    mask_id = tokenizer.mask_token_id
    row, trained_row = weights["model.embed_tokens.weight"][mask_id], trained["model.embed_tokens.weight"][mask_id]
    torch.testing.assert_close(row, trained_row, rtol=1.6e-2, atol=1e-5)
    fresh_row = load_file(decoder_dir / "model.safetensors")["model.embed_tokens.weight"].mean(dim=0)
    assert (row - trained_row).abs().max() < 0.1 * (fresh_row - trained_row).abs().max()


def test_merged_model_loads_without_peft_or_bitsandbytes(merged, tmp_path):
    model, _ = merged
    model.save_pretrained(tmp_path / "merged")
    script = f"""
import sys
sys.modules["bitsandbytes"] = None  # an import now raises ImportError
sys.modules["peft"] = None
import torch
from transformers import AutoModel
model = AutoModel.from_pretrained({str(tmp_path / "merged")!r})
assert {{p.dtype for p in model.parameters()}} == {{torch.bfloat16}}, {{p.dtype for p in model.parameters()}}
assert not any(m in sys.modules and sys.modules[m] is not None for m in ("bitsandbytes", "peft"))
print("loaded", type(model).__name__)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "loaded LlamaModel" in result.stdout


def _encoderized_tiny():
    model, tokenizer = make_decoder(), make_tokenizer()
    return model, ensure_special_tokens(model, tokenizer).mask_token_id


def _checkpointing(model) -> bool:
    return any(getattr(module, "gradient_checkpointing", False) for module in model.modules())


@pytest.mark.parametrize("load_in_4bit", [False, True])
def test_apply_lora_checkpoints_only_when_asked(load_in_4bit):
    adapter = AdapterConfig(lora_r=4, lora_alpha=8, load_in_4bit=load_in_4bit)
    model, mask_id = _encoderized_tiny()
    # Stands in for a bitsandbytes model: peft's kbit preparation reads this flag (and used to turn on reentrant
    # checkpointing for it by default, while the run record said checkpointing was off).
    model.is_loaded_in_4bit = load_in_4bit
    apply_lora(model, adapter, mask_id)  # the positional form: checkpointing stays off
    assert not _checkpointing(model)
    model, mask_id = _encoderized_tiny()
    model.is_loaded_in_4bit = load_in_4bit
    peft_model = apply_lora(model, adapter, mask_id, gradient_checkpointing=True)
    assert _checkpointing(model)
    layer = model.model.layers[0]
    assert layer._gradient_checkpointing_func.keywords == {"use_reentrant": False}
    # Gradients still reach the adapters through the checkpointed layers.
    peft_model.train()
    peft_model(input_ids=torch.tensor([[1, 2, mask_id, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss.backward()
    lora = [p for name, p in peft_model.named_parameters() if "lora_B" in name]
    assert lora and all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora)
