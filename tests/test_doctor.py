"""`hf-encoderize doctor`: one screen (or JSON) of versions, hardware, `auto`'s picks, known-bad combinations, and
whether a given model converts."""

import json

import torch
import transformers

from hf_encoderize.cli import main
from hf_encoderize.matrix import doctor as doctor_module
from hf_encoderize.matrix.doctor import DoctorConfig, doctor, doctor_report, known_bad, supported_ranges
from hf_encoderize.model.attention_backends import backend_candidates


def test_versions_are_the_installed_ones_checked_against_our_own_requirements():
    report = doctor_report()
    entry = report["versions"]["transformers"]
    assert entry["version"] == transformers.__version__ and entry["ok"] is True
    assert entry["supported"] == supported_ranges()["transformers"] and "<6" in entry["supported"]
    assert report["versions"]["torch"]["version"] == torch.__version__
    assert set(report["optional"]) >= {"bitsandbytes", "deepspeed", "flash-attn", "liger-kernel", "cut-cross-entropy",
                                       "mteb", "gradio"}


def test_auto_picks_are_those_training_would_make():
    report = doctor_report()
    assert report["auto"]["attention"] == backend_candidates(None)
    if not torch.cuda.is_available():
        assert report["hardware"]["gpu"] is None and "flash_attention_2" in report["auto"]["attention_skipped"]
        assert report["auto"]["loss"] == "fused"  # no kernel is timed by auto on the CPU


def test_a_version_outside_the_range_and_a_known_bad_pair_are_shown(monkeypatch):
    real = doctor_module.installed
    monkeypatch.setattr(doctor_module, "installed", lambda name: "4.57.6" if name == "transformers" else real(name))
    bad = [({"transformers": "<5"}, "transformers 4 has no is_causal switch")]
    monkeypatch.setattr(doctor_module, "KNOWN_BAD", bad)
    text = doctor(DoctorConfig())
    assert "transformers           4.57.6         OUTSIDE the supported" in text
    assert "known bad: transformers 4 has no is_causal switch" in text
    assert known_bad({"transformers": "5.23.0"}) == []


def test_one_screen_and_json(capsys):
    assert main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert len(text.splitlines()) <= 30 and "auto attention:" in text and "auto loss:" in text
    assert main(["doctor", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["versions"]["transformers"]["version"] == transformers.__version__


def test_a_model_folder_is_judged_by_its_architecture(decoder_dir, tmp_path, capsys):
    verdict = doctor_report(str(decoder_dir))["model"]
    assert verdict["converts"] is True and verdict["model_type"] == "llama" and verdict["auto_backend"] == "sdpa"
    assert verdict["probe"] == {"sdpa": "pass", "eager": "pass"}
    bert = tmp_path / "bert"
    bert_config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                          intermediate_size=64)
    bert_config.save_pretrained(bert)
    assert main(["doctor", "--model", str(bert)]) == 0
    assert "does not convert: 'bert' is already an encoder" in capsys.readouterr().out
    assert main(["doctor", "--model", str(tmp_path / "missing")]) == 0  # a report, not an error: it says why
    assert "does not convert: model folder" in capsys.readouterr().out
