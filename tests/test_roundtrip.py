"""The round trip: saved encoders loaded by a fresh process with plain transformers (hf_encoderize unimportable)."""

import json

import pytest

from hf_encoderize.matrix.roundtrip import check_saved, failures, round_trip, save_tiny, summary
from hf_encoderize.model.plain_attention import plain_attention
from hf_encoderize.publish.card_rows import plain_loading


def _save(model_type: str, out):
    return save_tiny(model_type, out)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("roundtrip")
    folders = {name: _save(name, root / name) for name in ("llama", "stablelm", "gpt_neo")}
    # A folder that claims to be an encoder but is causal in plain hands: the check must catch it.
    broken = _save("llama", root / "broken")
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "is_causal": True}))
    folders["broken"] = broken
    results = check_saved(list(folders.values()))
    return {name: results[str(folder)] for name, folder in folders.items()}, folders


def test_llama_round_trip_passes_every_backend(reports):
    report = reports[0]["llama"]
    assert failures(report) == [], report
    for backend in ("sdpa", "eager", "flex_attention"):
        assert report[backend]["loaded"] is True
        assert report[backend]["bidirectional"] is report[backend]["padding"] is report[backend]["packing"] is True
    assert report["fill_mask"] is True and report["sentence_transformers"] is True
    assert report["remote_automodel"] is True
    assert summary(report).startswith("pass (sdpa, eager, flex_attention")


def test_stablelm_saved_default_is_bidirectional(reports):
    """StableLM's decoder layer drops the kwargs that carry is_causal=False, so sdpa stays causal in plain hands:
    the saved config selects eager, declares sdpa causal, and the card says so."""
    report, folders = reports[0]["stablelm"], reports[1]
    assert report["declared_causal"] == ["sdpa"]
    assert report["sdpa"]["bidirectional"] is not True  # the limitation is real, not assumed
    assert report["default"]["backend"] == "eager" and report["default"]["bidirectional"] is True
    assert failures(report) == [] and "saved default eager" in summary(report)
    config = json.loads((folders["stablelm"] / "config.json").read_text())
    assert config["attn_implementation"] == "eager"
    row = plain_loading(config["hf_encoderize"]["plain_attention"])
    assert "selects `eager`" in row and "`sdpa`" in row


def test_round_trip_catches_a_causal_folder(reports):
    problems = failures(reports[0]["broken"])
    assert any(p.startswith("default bidirectional: causal") for p in problems), problems


def test_plain_attention_verdicts():
    assert plain_attention("stablelm") == {"sdpa": False, "eager": True}
    assert plain_attention("llama") == {"sdpa": True, "eager": True}


def test_round_trip_reports_a_failed_save(tmp_path):
    result = round_trip(["no_such_model_type"], tmp_path)
    assert list(result["no_such_model_type"]) == ["save"]
    assert failures(result["no_such_model_type"])[0].startswith("save: ")


def test_gpt_neo_is_causal_in_plain_hands_and_says_so(reports):
    """GPT-Neo rebuilds its hard-coded causal buffer at load: no plain backend is bidirectional, the folder declares
    it, and the shipped remote code (AutoModel and AutoModelForMaskedLM) is."""
    report = reports[0]["gpt_neo"]
    assert report["declared_causal"] == ["eager"] and report["default"]["bidirectional"] is not True
    assert report["remote_automodel"] is True and report["fill_mask"] is True
    assert summary(report).startswith("plain transformers cannot: causal under eager, declared (AutoModel and")


def test_remote_code_initialises_buffers_like_the_native_class(tmp_path):
    """FalconH1's non-persistent `mup_vector` is set only by the root model's init branch; transformers skips that
    branch for custom code, so the shipped classes declare themselves native (`is_custom_code`). Before, the remote
    AutoModel and fill-mask gave NaN."""
    import torch
    from transformers import AutoModel, AutoModelForMaskedLM

    out = save_tiny("falcon_h1", tmp_path / "falcon_h1")
    ids = torch.randint(5, 100, (1, 8))
    native = AutoModel.from_pretrained(out).eval()
    for cls in (AutoModel, AutoModelForMaskedLM):
        remote = cls.from_pretrained(out, trust_remote_code=True).eval()
        for (name, mine), (_, theirs) in zip(remote.named_buffers(), native.named_buffers(), strict=False):
            if name.endswith("mup_vector"):
                assert torch.equal(mine, theirs), name
        with torch.no_grad():
            assert torch.isfinite(remote(input_ids=ids)[0]).all()
