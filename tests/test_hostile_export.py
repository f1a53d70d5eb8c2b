"""`export` as careful as every other command (issue 41): a broken or foreign folder is refused up front (exit 2, one
`error:` line, no traceback, every file byte for byte), folder code never runs without --trust-remote-code, a relative
DIR exports, a NaN figure fails its check, and a failed check removes only files our earlier export record lists."""

import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest
from conftest import make_decoder, make_tokenizer

pytest.importorskip("onnxruntime")

from hf_encoderize.cli import main  # noqa: E402
from hf_encoderize.model.bidirectional import encoderize  # noqa: E402
from hf_encoderize.model.saving import save_encoder  # noqa: E402
from hf_encoderize.publish import export as export_module  # noqa: E402
from hf_encoderize.publish import gguf_export  # noqa: E402


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model, tokenizer = make_decoder(), make_tokenizer()
    report = encoderize(model, tokenizer)
    return save_encoder(model, tokenizer, tmp_path_factory.mktemp("saved") / "encoder", metadata=report.to_dict())


def _copy(saved: Path, tmp: Path) -> Path:
    import shutil

    return Path(shutil.copytree(saved, tmp / "enc"))


def _edited_code(enc: Path) -> None:
    path = enc / "modeling_encoderize.py"
    path.write_text(path.read_text() + "\nopen('/tmp/pwned-by-export', 'w').write('ran')\n")


def _foreign_module(enc: Path) -> None:
    config = json.loads((enc / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "evil.Model"}
    (enc / "config.json").write_text(json.dumps(config))
    (enc / "evil.py").write_text("raise SystemExit('ran')\n")


def _onnx_is_a_file(enc: Path) -> None:
    (enc / "onnx").write_text("my notes")


def _user_onnx(enc: Path) -> None:
    (enc / "onnx").mkdir()
    (enc / "onnx" / "model.onnx").write_bytes(b"my own graph")


def _cut_weights(enc: Path) -> None:
    weights = enc / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def _cut_config(enc: Path) -> None:
    text = (enc / "config.json").read_text()
    (enc / "config.json").write_text(text[: len(text) // 2])


def _decoder(enc: Path) -> None:
    import shutil

    shutil.rmtree(enc)
    make_decoder().save_pretrained(enc)
    make_tokenizer().save_pretrained(enc)  # no pad token: a decoder, never converted
    tokenizer_config = json.loads((enc / "tokenizer_config.json").read_text())
    tokenizer_config.pop("pad_token", None)
    (enc / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))


def _user_gguf(enc: Path) -> None:
    (enc / "model-q8_0.gguf").write_bytes(b"my own quantisation")


REFUSED = {  # case: (break the folder, what the one error line says[, export's flags])
    "the user's own model-q8_0.gguf, --format gguf": (_user_gguf, "not written by an earlier export",
                                                      ["--format", "gguf"]),
    "an edited modeling_encoderize.py, no --trust-remote-code": (_edited_code, "--trust-remote-code"),
    "auto_map naming another module, no --trust-remote-code": (_foreign_module, "--trust-remote-code"),
    "a file named onnx where export writes a folder": (_onnx_is_a_file, "is a file"),
    "the user's own onnx/model.onnx": (_user_onnx, "not written by an earlier export"),
    "truncated weights": (_cut_weights, "cannot be read"),
    "a cut config.json": (_cut_config, "not valid JSON"),
    "a cut config.json, --format gguf": (_cut_config, "not valid JSON", ["--format", "gguf"]),
    "truncated weights, --format gguf": (_cut_weights, "cannot be read", ["--format", "gguf"]),
    "a decoder folder (no pad token)": (_decoder, "pad token"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_up_front_with_every_file_unchanged(case, saved, tmp_path, capsys):
    breaks, message, *flags = REFUSED[case]
    enc = _copy(saved, tmp_path)
    breaks(enc)
    before = _tree(tmp_path)
    Path("/tmp/pwned-by-export").unlink(missing_ok=True)
    code = main(["export", str(enc), *(flags[0] if flags else [])])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and message in errors[0] and "Traceback" not in err, err
    assert _tree(tmp_path) == before
    assert not Path("/tmp/pwned-by-export").exists()


def test_a_relative_dir_exports_and_keeps_what_an_earlier_export_verified(saved, tmp_path, monkeypatch):
    """The checks run in the staging folder: a relative DIR exported nothing and deleted the earlier files."""
    enc = _copy(saved, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(export_module, "THRESHOLDS", {"model.onnx": 0.999})
    assert main(["export", "enc"]) == 0
    assert main(["export", "enc"]) == 0
    record = json.loads((enc / "export_record.json").read_text())["onnx"]["variants"]["model.onnx"]
    assert record["verdict"] == "verified", record
    assert (enc / "onnx" / "model.onnx").is_file()


def test_nan_embeddings_are_not_verified_and_a_failed_check_removes_only_our_files(saved, tmp_path, monkeypatch):
    """A NaN cosine is not `< threshold`: NaN embeddings were recorded "verified". The file the earlier export kept
    (listed in its record) is removed when the new check fails, as it no longer matches."""
    enc = _copy(saved, tmp_path)
    monkeypatch.setattr(export_module, "THRESHOLDS", {"model.onnx": 0.999})
    assert export_module.export(export_module.ExportConfig(str(enc)))["model.onnx"] == "verified"
    real = export_module.write_reference

    def nan_reference(st, pooling, texts, path):
        real(st, pooling, texts, path)
        reference = json.loads(path.read_text())
        reference["embeddings"][0][0] = float("nan")
        if "encoded" in reference:  # the pooled graph's reference
            reference["encoded"][0][0] = float("nan")
        path.write_text(json.dumps(reference))
        return path

    monkeypatch.setattr(export_module, "write_reference", nan_reference)
    verdict = export_module.export(export_module.ExportConfig(str(enc)))["model.onnx"]
    assert verdict.startswith("not kept") and "not finite" in verdict, verdict
    assert not (enc / "onnx" / "model.onnx").exists()  # ours, listed in the record: no longer matches the model


def _sdist(path: Path, version: str, parts: dict[str, str]) -> Path:
    root = path / "src" / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    for rel, text in parts.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    sdist = path / f"llama_cpp_python-{version}.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(path / "src" / f"llama_cpp_python-{version}", arcname=f"llama_cpp_python-{version}")
    return sdist


PARTS = {"convert_hf_to_gguf.py": "# converter\n", "conversion/__init__.py": "", "gguf-py/gguf/__init__.py": "",
         "LICENSE": "MIT\n"}


def test_a_half_filled_converter_cache_is_rebuilt_whole(tmp_path):
    sdist = _sdist(tmp_path, "9.9.9", PARTS)
    cache = tmp_path / "cache" / "9.9.9"
    cache.mkdir(parents=True)
    (cache / "convert_hf_to_gguf.py").write_text("# converter\n")  # cut after the first file
    assert not gguf_export.is_complete(cache)
    assert gguf_export.unpack_converter(sdist, cache) == cache
    assert gguf_export.is_complete(cache) and (cache / "conversion" / "__init__.py").is_file()
    assert [p.name for p in cache.parent.iterdir()] == ["9.9.9"]  # no staging or set-aside folder left


def test_a_cut_sdist_is_one_line(tmp_path, capsys):
    sdist = _sdist(tmp_path, "9.9.9", PARTS)
    sdist.write_bytes(sdist.read_bytes()[: os.path.getsize(sdist) // 2])
    cache = tmp_path / "cache" / "9.9.9"
    with pytest.raises(gguf_export.EncoderizeError, match="cannot be unpacked"):
        gguf_export.unpack_converter(sdist, cache)
    assert not cache.exists() and [p.name for p in cache.parent.iterdir()] == []


def _foreign_copy_of_our_code(enc: Path) -> None:
    """auto_map names a module of the folder's own (a working copy of ours under another name)."""
    (enc / "mine.py").write_text((enc / "modeling_encoderize.py").read_text())
    config = json.loads((enc / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "mine.EncoderModel"}
    (enc / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("foreign", [_edited_code, _foreign_copy_of_our_code], ids=["edited", "auto_map"])
def test_trust_remote_code_lets_a_foreign_folder_through(foreign, saved, tmp_path, monkeypatch, capsys):
    """Without the flag the folder is refused and its code never runs; with it, export loads it and exports."""
    enc = _copy(saved, tmp_path)
    foreign(enc)
    ran = Path("/tmp/pwned-by-export")
    ran.unlink(missing_ok=True)
    monkeypatch.setattr(export_module, "THRESHOLDS", {"model.onnx": 0.999})
    assert main(["export", str(enc)]) == 2 and not ran.exists()
    assert "--trust-remote-code" in capsys.readouterr().err
    assert main(["export", str(enc), "--trust-remote-code"]) == 0, capsys.readouterr().err[-2000:]
    assert (foreign is not _edited_code) or ran.read_text() == "ran"  # the folder's code ran: the flag let it through
    ran.unlink(missing_ok=True)
    record = json.loads((enc / "export_record.json").read_text())["onnx"]["variants"]["model.onnx"]
    assert record["verdict"] == "verified" and (enc / "onnx" / "model.onnx").is_file(), record
