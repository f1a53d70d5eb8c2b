"""Saved encoders load with plain transformers and sentence-transformers, without hf_encoderize."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_decoder, make_tokenizer

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.model.bidirectional import encoderize, verify_bidirectional
from hf_encoderize.model.saving import save_encoder

CHECK = Path(__file__).with_name("clean_env_check.py")


def clean_env_report(out: Path) -> dict:
    """Load `out` in a subprocess where `import hf_encoderize` fails."""
    done = subprocess.run([sys.executable, str(CHECK), str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model, tokenizer = make_decoder("llama", tie_word_embeddings=False), make_tokenizer()
    report = encoderize(model, tokenizer)
    verify_bidirectional(model)
    out = tmp_path_factory.mktemp("enc") / "encoder"
    save_encoder(model, tokenizer, out, metadata=report.to_dict())
    return out


def test_folder_layout_and_config(saved):
    config = json.loads((saved / "config.json").read_text())
    assert config["is_causal"] is False and config["model_type"] == "llama"
    assert config["auto_map"]["AutoModelForMaskedLM"] == "modeling_encoderize.EncoderForMaskedLM"
    assert config["hf_encoderize"]["tokens"]["mask_token_path"] == "added"
    modeling = (saved / "modeling_encoderize.py").read_text()
    imports = {line.split()[1].split(".")[0] for line in modeling.splitlines() if line.startswith(("import ", "from "))}
    assert imports - set(sys.stdlib_module_names) == {"torch", "transformers"}  # nothing a user lacks
    assert json.loads((saved / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"] is True
    assert not list(saved.parent.glob(".*partial"))


def test_reload_with_automodel_passes_probe(saved):
    from transformers import AutoModel

    verify_bidirectional(AutoModel.from_pretrained(saved))


def test_reload_mlm_with_remote_code_passes_probe(saved):
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(saved, trust_remote_code=True)
    assert type(model).__name__ == "EncoderForMaskedLM"
    verify_bidirectional(model)


def test_loads_in_clean_environment(saved):
    report = clean_env_report(saved)
    assert report["automodel_class"] == "LlamaModel" and report["is_causal"] is False
    assert report["later_token_changes_first"] is True
    assert report["right_padding_max_diff"] < 1e-4
    assert report["mlm_class"] == "EncoderForMaskedLM" and len(report["fill_mask"]) == 3
    assert report["st_shape"] == [2, 32] and report["st_mean_pool_max_diff"] < 1e-4


def test_refuses_non_empty_output_and_keeps_user_files(tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    model, tokenizer = make_decoder(), make_tokenizer()
    encoderize(model, tokenizer)
    with pytest.raises(EncoderizeError, match="not empty"):
        save_encoder(model, tokenizer, out)
    with pytest.raises(EncoderizeError, match="did not write"):
        save_encoder(model, tokenizer, out, overwrite=True)  # a folder of the user's is never replaced
    assert (out / "notes.txt").read_text() == "mine" and len(list(out.iterdir())) == 1
    ours = save_encoder(model, tokenizer, tmp_path / "ours")
    save_encoder(model, tokenizer, ours, overwrite=True)  # an encoder saved here earlier is
    assert (ours / "config.json").exists()


def test_failed_save_leaves_nothing_behind(tmp_path, monkeypatch):
    model, tokenizer = make_decoder(), make_tokenizer()
    encoderize(model, tokenizer)

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(type(tokenizer), "save_pretrained", broken)
    with pytest.raises(OSError):
        save_encoder(model, tokenizer, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_weights_given_in_another_dtype_are_declared_in_that_dtype(tmp_path):
    """Exports and sharded saves pass the weights cast to the loaded dtype while the live model holds fp32 master
    weights; config.json must name the weights' dtype, or a plain load would upcast a bf16 encoder to fp32."""
    import torch
    from transformers import AutoModel

    model, tokenizer = make_decoder(), make_tokenizer()
    encoderize(model, tokenizer)
    state = {name: t.detach().to(torch.bfloat16) for name, t in model.state_dict().items()}
    out = save_encoder(model, tokenizer, tmp_path / "bf16", state_dict=state)
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    assert AutoModel.from_pretrained(out).dtype == torch.bfloat16
    plain = save_encoder(model, tokenizer, tmp_path / "fp32")  # no state dict: the live model's own dtype
    assert json.loads((plain / "config.json").read_text())["dtype"] == "float32"


def test_config_carries_the_fields_serving_engines_read_and_still_loads_bidirectional(saved):
    """vLLM's Qwen2/Qwen3 and TEI's Qwen2 read `is_causal`; TEI's Llama/Mistral/Qwen3 read
    `use_bidirectional_attention` (docs/publishing.md): both are written, and plain transformers still builds the
    native class with bidirectional attention (a later token moves position 0)."""
    import torch
    from transformers import AutoModel

    config = json.loads((saved / "config.json").read_text())
    assert config["is_causal"] is False and config["use_bidirectional_attention"] is True
    model = AutoModel.from_pretrained(saved).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    changed = ids.clone()
    changed[0, -1] = 9
    with torch.no_grad():
        first, second = (model(input_ids=x).last_hidden_state[0, 0] for x in (ids, changed))
    assert type(model).__name__ == "LlamaModel" and not torch.allclose(first, second)


def test_engine_flags_leave_a_field_transformers_acts_on_alone():
    """Gemma 3's own config declares `use_bidirectional_attention` (transformers then halves its sliding window):
    writing it would change the model that loads, so it is left as the architecture has it."""
    from transformers import Gemma3TextConfig, LlamaConfig

    from hf_encoderize.model.saving import engine_flags

    assert engine_flags(LlamaConfig()) == {"use_bidirectional_attention": True}
    assert engine_flags(Gemma3TextConfig()) == {}


def test_saving_leaves_the_live_model_and_tokenizer_as_they_were(tmp_path):
    """A CLM phase exports mid-run: the save writes a bidirectional config but must not make the live model one."""
    model, tokenizer = make_decoder(), make_tokenizer()
    tokenizer.padding_side = "left"
    # save_pretrained itself records the rest
    ours = ("is_causal", "use_cache", "auto_map", "hf_encoderize", "use_bidirectional_attention")
    config_before = {key: getattr(model.config, key, None) for key in ours}
    save_encoder(model, tokenizer, tmp_path / "enc", metadata={"note": "x"})
    assert {key: getattr(model.config, key, None) for key in ours} == config_before
    assert not hasattr(model.config, "hf_encoderize") and not hasattr(model.config, "auto_map")
    assert tokenizer.padding_side == "left"
    written = json.loads((tmp_path / "enc" / "config.json").read_text())
    assert written["is_causal"] is False and written["hf_encoderize"]["note"] == "x" and "auto_map" in written
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(tmp_path / "enc").padding_side == "right"
