"""Working across the supported transformers range (pyproject.toml): the shims for APIs that came later, and saved
encoders that stay bidirectional when a later release reads them. scripts/test.sh runs this file in both
environments, the newest releases and constraints/floor.txt, so each shim is tested at both ends."""

import json
import warnings
from importlib import metadata

import pytest
import torch
import transformers
from conftest import make_decoder
from transformers import masking_utils

from hf_encoderize.cli import main
from hf_encoderize.matrix.roundtrip import save_tiny
from hf_encoderize.model import isolation
from hf_encoderize.model.bidirectional import encoderize
from hf_encoderize.model.isolation import document_ids_from_lengths, packed_forward
from hf_encoderize.model.plain_attention import saved_backend
from hf_encoderize.model.remote_code.modeling_encoderize import unverified_backend
from hf_encoderize.publish.card_rows import plain_loading


def test_remap_shim_is_transformers_own_where_it_exists_and_agrees_with_it():
    """5.23+ has `remap_positions_for_packed_sequence`; 5.17-5.22 get `_remap_positions`, which computes the same."""
    chosen = isolation._remap_positions_function()
    native = getattr(masking_utils, "remap_positions_for_packed_sequence", None)
    assert chosen is (native or isolation._remap_positions)
    window = masking_utils.sliding_window_bidirectional_mask_function(2)
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2]])
    ours = isolation._remap_positions(window, positions)
    theirs = (native or isolation._remap_positions)(window, positions)
    grid = [(q, kv) for q in range(7) for kv in range(7)]
    assert [bool(ours(0, 0, q, kv)) for q, kv in grid] == [bool(theirs(0, 0, q, kv)) for q, kv in grid]
    # Document-local: query 4 (position 0 of the second document) is 3 positions from key 3, outside the window.
    assert bool(ours(0, 0, 4, 3)) is False and bool(ours(0, 0, 6, 5)) is True


@pytest.mark.parametrize("backend", ["sdpa", "eager"])
def test_packed_documents_stay_apart_without_transformers_remap(backend, monkeypatch):
    """The floor's situation (no `remap_positions_for_packed_sequence`) forced on any release: isolation holds."""
    monkeypatch.delattr(masking_utils, "remap_positions_for_packed_sequence", raising=False)
    model = make_decoder("llama", backend)
    encoderize(model)
    a, b = torch.randint(0, 100, (1, 5)), torch.randint(0, 100, (1, 4))
    row = torch.cat([a, b, torch.zeros(1, 2, dtype=torch.long)], dim=1)
    with torch.no_grad():
        packed = packed_forward(model.model, row, document_ids_from_lengths([[5, 4]], 11)).last_hidden_state
        alone_a, alone_b = model.model(input_ids=a).last_hidden_state, model.model(input_ids=b).last_hidden_state
    assert (packed[:, :5] - alone_a).abs().max() < 1e-4 and (packed[:, 5:9] - alone_b).abs().max() < 1e-4


def test_a_backend_never_verified_is_never_left_to_the_default():
    """Unpinned only when every backend was verified; GPT-Neo (sdpa raised under 5.23, eager declared causal) pins
    eager, so a release that gives it sdpa (5.24) still loads what was checked."""
    assert saved_backend({"sdpa": True, "eager": True}) is None
    assert saved_backend({"sdpa": True, "eager": "not verified (ValueError)"}) == "sdpa"
    assert saved_backend({"sdpa": "not verified (ValueError)", "eager": True}) == "eager"
    assert saved_backend({"sdpa": "not verified (ValueError)", "eager": False}) == "eager"
    assert saved_backend({"sdpa": "not verified (KeyError)", "eager": "not verified (KeyError)"}) is None


@pytest.fixture(scope="module")
def gpt_neo(tmp_path_factory):
    return save_tiny("gpt_neo", tmp_path_factory.mktemp("compat") / "gpt_neo")


def _first_position_sees_last(model, vocab=100) -> bool:
    ids = torch.randint(3, vocab, (1, 8), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] + 1) % vocab
    with torch.no_grad():
        first, moved = (model(input_ids=x).last_hidden_state[0, 0] for x in (ids, changed))
    return float((first - moved).abs().max()) > 1e-6


def test_gpt_neo_saved_encoder_pins_what_was_verified_and_stays_bidirectional(gpt_neo):
    """The issue's case: a GPT-Neo encoder read by whatever transformers runs this test (5.24 gave GPT-Neo an sdpa
    kernel) loads the verified backend by default, and the shipped remote code keeps position 0 seeing the last
    token, with no warning."""
    config = json.loads((gpt_neo / "config.json").read_text())
    plain = config["hf_encoderize"]["plain_attention"]
    assert config["attn_implementation"] == "eager" == plain["saved_default"]
    assert plain["transformers"] == transformers.__version__
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning here would mean the default load picked an unverified backend
        model = transformers.AutoModel.from_pretrained(gpt_neo, trust_remote_code=True).eval()
        assert model.config._attn_implementation == "eager"
        assert _first_position_sees_last(model)
    row = plain_loading(plain)
    assert f"verified with transformers {transformers.__version__}" in row and "stays causal" in row


def test_remote_code_warns_in_one_line_for_a_backend_never_verified(tmp_path):
    """A folder whose round trip ran only eager (sdpa raised there, as GPT-Neo's did before 5.24), loaded with sdpa
    by a release that has it: bidirectional still (the patch covers sdpa), but the user is told it was never checked."""
    folder = save_tiny("llama", tmp_path / "llama")
    config = json.loads((folder / "config.json").read_text())
    config["hf_encoderize"]["plain_attention"].update(sdpa="not verified (ValueError)", transformers="5.17.0")
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.warns(UserWarning) as caught:
        model = transformers.AutoModel.from_pretrained(folder, trust_remote_code=True, attn_implementation="sdpa")
        assert _first_position_sees_last(model.eval())
    messages = [str(w.message) for w in caught if "hf-encoderize" in str(w.message)]
    assert len(messages) == 1 and "\n" not in messages[0]
    assert "'sdpa' was never verified" in messages[0] and "transformers 5.17.0" in messages[0]
    assert "attn_implementation='eager'" in messages[0]


def test_unverified_backend_judges_only_folders_that_recorded_their_release():
    class Config:
        _attn_implementation = "sdpa"
        hf_encoderize = {"plain_attention": {"sdpa": "not verified (ValueError)", "eager": False}}

    assert unverified_backend(Config()) is None  # saved before the release was recorded: not judged
    Config.hf_encoderize["plain_attention"]["transformers"] = "5.23.0"
    assert "'sdpa' was never verified" in unverified_backend(Config())
    Config._attn_implementation = "eager"
    assert unverified_backend(Config()) is None  # declared causal in plain hands, but it ran: the patch covers it


def test_contrastive_lora_is_refused_in_one_line_below_the_peft_floor(tmp_path, monkeypatch, capsys):
    """A peft below the floor `--lora-r` runs on: `contrastive --lora-r` says so before any work (forced here)."""
    from hf_encoderize.recipes.contrastive import model as contrastive_model

    monkeypatch.setattr(contrastive_model, "PEFT_FLOOR", "99.0")
    out = tmp_path / "out"
    code = main(["contrastive", str(tmp_path / "encoder"), "--data-files", str(tmp_path / "t.jsonl"), "--output-dir",
                 str(out), "--lora-r", "4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and not out.exists()
    assert err[0].startswith("error: contrastive --lora-r needs peft >= 99.0") and "pip install 'peft>=99.0'" in err[0]
    assert f"(installed: {metadata.version('peft')})" in err[0]


def test_transformers_peft_gate_above_the_released_peft_is_lowered_for_lora(monkeypatch):
    """transformers 5.24's integration asks for peft 0.22 (unreleased); from our floor on, the gate is lowered to the
    installed release so sentence-transformers' add_adapter, saves and resumes run (they do on 0.21.2)."""
    from transformers.integrations import peft as integration
    from transformers.utils.peft_utils import check_peft_version

    from hf_encoderize.recipes.contrastive import check_peft_integration

    monkeypatch.setattr(integration, "MIN_PEFT_VERSION", "99.0", raising=False)
    check_peft_integration()
    assert integration.MIN_PEFT_VERSION == metadata.version("peft")
    check_peft_version(min_version=integration.MIN_PEFT_VERSION)  # what every integration method calls: passes


def test_compatibility_cells():
    """scripts/compatibility.py's pass / declared / fail, from the matrix's own cells (its doctests)."""
    import doctest
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "compatibility.py"
    spec = importlib.util.spec_from_file_location("compatibility", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert doctest.testmod(module).failed == 0
    declared = {"backends": {"sdpa": "pass", "eager": "pass"},
                "roundtrip": "plain transformers cannot: causal under eager, declared (AutoModel and ...)"}
    assert module.cell(declared) == "declared"
    assert module.cell({"backends": {"sdpa": "pass"}, "roundtrip": "default bidirectional: causal"}) == "fail"
