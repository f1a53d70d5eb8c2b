"""Issue 30, the evaluation, Space and resume cases: each refusal is exit 2 with one `error:` line and no traceback;
each wrong result is shown right.

1. `eval --mteb`: two collections with one folder name, a collection named `summary`, a null query, a replaced model.
2. A BEIR file that is not UTF-8.
3. The Space over a run folder whose run record is cut short.
4. `--from-checkpoint` weights cut short or tampered with.
5. The resume advice: the command a message advises works.
6. `--shuffle-buffer` and `next_document`: a run and its continuation read no document twice.
"""

import json
import shutil

import pytest
from conftest import make_decoder, make_tokenizer

from hf_encoderize.cli import main


def _jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _snapshot(folder) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _assert_one_line_error(code: int, err: str, expected: str) -> None:
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert code == 2, err
    assert "Traceback" not in err, err
    assert len(lines) == 1 and expected in lines[0], err


# ---------------------------------------------------------------------------------------------- 1, 2: eval --mteb


def _encoder(folder, shift: float = 0.0):
    """A tiny encoder folder; `shift` moves every weight, so the same folder can hold another model."""
    import torch

    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.saving import save_encoder

    model, tokenizer = make_decoder(), make_tokenizer()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(shift)
    return save_encoder(model, tokenizer, folder, metadata=encoderize(model, tokenizer).to_dict())


def _beir(folder, queries=None):
    _jsonl(folder / "corpus.jsonl", [{"_id": f"d{i}", "text": f"w{i} w{i + 1} w{i + 2}"} for i in range(8)])
    _jsonl(folder / "queries.jsonl", queries or [{"_id": "q1", "text": "w3 w4"}, {"_id": "q2", "text": "w6"}])
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\nq2\td6\t1\n")
    return folder


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    pytest.importorskip("mteb")
    return _encoder(tmp_path_factory.mktemp("mteb_enc") / "enc")


def _same_folder_name(tmp_path):
    return f"{_beir(tmp_path / 'a' / 'sci')},{_beir(tmp_path / 'b' / 'SCI')}", "two tasks are named"


def _named_summary(tmp_path):
    return str(_beir(tmp_path / "summary")), "would overwrite summary.json"


def _null_query(tmp_path):
    folder = _beir(tmp_path / "nulls", [{"_id": "q1", "text": "w3"}, {"_id": "q2", "text": None}])
    return str(folder), "queries.jsonl line 2: text is null, not a string"


def _null_document_id(tmp_path):
    folder = _beir(tmp_path / "nullid")
    _jsonl(folder / "corpus.jsonl", [{"_id": "d3", "text": "w1"}, {"_id": None, "text": "w2"}])
    return str(folder), "corpus.jsonl line 2: _id is null"


def _not_utf8(name):
    def case(tmp_path):  # a Latin-1 byte in the first value of the file: corpus/queries line 1, qrels line 2
        folder = _beir(tmp_path / "latin1")
        path = folder / name
        path.write_bytes(path.read_bytes().replace(b"d0" if "corpus" in name else b"q1", b"\xe9", 1))
        return str(folder), f"{name} line {2 if name.startswith('qrels') else 1} is not UTF-8 text"
    case.__name__ = f"not_utf8_{name.split('/')[0].split('.')[0]}"
    return case


@pytest.mark.parametrize("make_case", [
    _same_folder_name, _named_summary, _null_query, _null_document_id,
    _not_utf8("corpus.jsonl"), _not_utf8("queries.jsonl"), _not_utf8("qrels/test.tsv"),
], ids=lambda case: case.__name__)
def test_mteb_collection_refused_in_one_line(encoder, tmp_path, capsys, make_case):
    spec, expected = make_case(tmp_path)
    out = tmp_path / "out"
    code = main(["eval", str(encoder), "--mteb", spec, "--output-dir", str(out)])
    _assert_one_line_error(code, capsys.readouterr().err, expected)
    assert not out.exists()


def test_mteb_scores_of_a_replaced_model_are_not_kept(tmp_path, capsys):
    pytest.importorskip("mteb")
    model, out = _encoder(tmp_path / "enc"), tmp_path / "out"
    first, second = str(_beir(tmp_path / "first")), str(_beir(tmp_path / "second"))
    results = out / "enc" / "mteb"
    assert main(["eval", str(model), "--mteb", first, "--output-dir", str(out)]) == 0
    assert main(["eval", str(model), "--mteb", second, "--output-dir", str(out)]) == 0
    # The same model: the second call's summary keeps the first task.
    assert set(json.loads((results / "summary.json").read_text())["tasks"]) == {"first", "second"}
    capsys.readouterr()
    shutil.rmtree(model)
    _encoder(model, shift=0.05)  # another model in the same folder, as a rerun or --overwrite leaves it
    assert main(["eval", str(model), "--mteb", second, "--output-dir", str(out)]) == 0
    assert set(json.loads((results / "summary.json").read_text())["tasks"]) == {"second"}
    assert not (results / "first.json").exists()  # no stale result file beside the new summary either
    assert "the earlier scores" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ 3: the Space


@pytest.fixture
def cut_record_run(tmp_path):
    """A run folder whose run_record.json was cut short mid-write (a full disk, a kill)."""
    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.saving import save_encoder

    model, tokenizer = make_decoder(), make_tokenizer()
    save_encoder(model, tokenizer, tmp_path / "run" / "encoder",
                 metadata={**encoderize(model, tokenizer).to_dict(), "base_model": "base/from-config"})
    (tmp_path / "run" / "run_record.json").write_text('{"base_model": "base/from-rec')
    return tmp_path / "run"


def test_space_command_refuses_a_cut_run_record_in_one_line(cut_record_run):
    pytest.importorskip("gradio")
    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.publish.space import SpaceConfig, app_settings

    with pytest.raises(EncoderizeError, match="run_record.json' is not valid JSON"):
        app_settings(SpaceConfig(str(cut_record_run), port=0))


@pytest.mark.parametrize("record", [b'{"base_model": "base/from-rec', b'{"base_model": "\xff"}', b'[1, 2]'])
def test_space_app_starts_and_says_the_run_record_could_not_be_read(cut_record_run, capsys, record):
    """The app alone (a pushed Space runs `python app.py`), or `space --base-model`, reads the record itself."""
    pytest.importorskip("gradio")
    from hf_encoderize.publish.space import load_app

    (cut_record_run / "run_record.json").write_bytes(record)
    app = load_app()
    models = app.Models(app.Settings(encoder=str(cut_record_run / "encoder")))
    assert models.settings.base_model == "base/from-config"  # config.json's metadata instead
    if record.startswith(b"{"):
        assert "run_record.json could not be read" in models.record_note
        assert "run_record.json could not be read" in capsys.readouterr().err
        page = app.build_demo(models.settings).config
        assert any("could not be read" in str(block.get("props", {}).get("value", ""))
                   for block in page["components"])


# ----------------------------------------------------------------------------------- 4: --from-checkpoint files

CPT_ARGS = ["--max-seq-length", "32", "--batch-size", "4", "--learning-rate", "1e-3", "--eval-steps", "0",
            "--no-progress"]


def _cpt(decoder_dir, corpus, out, *extra) -> list[str]:
    return ["cpt", str(decoder_dir), "--data-files", str(corpus), *CPT_ARGS, "--output-dir", str(out), *extra]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from conftest import write_corpus

    return write_corpus(tmp_path_factory.mktemp("data") / "docs.jsonl", 120, lambda i: 4 + i % 9)


@pytest.fixture(scope="module")
def run4(decoder_dir, corpus, tmp_path_factory):
    """Four steps with a checkpoint every 2 (both kept): a source to branch from."""
    out = tmp_path_factory.mktemp("runs") / "four"
    assert main(_cpt(decoder_dir, corpus, out, "--max-steps", "4", "--warmup-steps", "1", "--decay-steps", "1",
                     "--save-steps", "2", "--save-total-limit", "5")) == 0
    return out


def _cut(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _other_shape(path):
    from safetensors.torch import load_file, save_file

    weights = load_file(path)
    name = next(key for key, value in weights.items() if value.dim() == 2)
    weights[name] = weights[name][:-1]  # one row short: a tampered file, or another model's
    save_file(weights, path, metadata={"format": "pt"})


BRANCH_DAMAGE = {
    "weights cut short": ("model.safetensors", _cut),
    "weights of another shape": ("model.safetensors", _other_shape),
    "optimizer cut short": ("optimizer.bin", _cut),
    "trainer state cut short": ("trainer_state.json", _cut),
    "run settings cut short": ("../../run_settings.json", _cut),
}


@pytest.mark.parametrize("case", list(BRANCH_DAMAGE))
def test_damaged_from_checkpoint_is_one_line_naming_the_file(run4, decoder_dir, corpus, tmp_path, capsys, case):
    import shutil as _shutil

    source = _shutil.copytree(run4, tmp_path / "source")
    checkpoint = source / "checkpoints" / "step-0000002"
    name, damage = BRANCH_DAMAGE[case]
    damage(checkpoint / name)
    before = _snapshot(source)
    out = tmp_path / "branch"
    code = main(_cpt(decoder_dir, corpus, out, "--max-steps", "4", "--warmup-steps", "1", "--decay-steps", "1",
                     "--from-checkpoint", str(checkpoint)))
    _assert_one_line_error(code, capsys.readouterr().err, (checkpoint / name).resolve().name)
    assert not out.exists() and _snapshot(source) == before


# ------------------------------------------------------------------------------------------- 5: resume advice


def test_resume_advice_never_loops(run4, decoder_dir, corpus, tmp_path, capsys):
    """A run folder of ours that holds a run record and metrics but no checkpoint (stopped before its first one, or
    its checkpoints deleted): the advice of each refusal is a command that works."""
    import shutil as _shutil

    out = _shutil.copytree(run4, tmp_path / "stopped")
    _shutil.rmtree(out / "checkpoints")
    args = _cpt(decoder_dir, corpus, out, "--max-steps", "2")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "is not empty" in err and "--resume" not in err  # no checkpoint: --resume is not advised
    assert main([*args, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint under" in err and "--overwrite" in err  # what it advises ...
    assert main([*args, "--overwrite"]) == 0  # ... works
    # With a checkpoint, --resume is advised, and works.
    assert main(args) == 2 and "--resume" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 0


# ------------------------------------------------------------------------------ 6: --shuffle-buffer continuation


def _documents_trained(stream, steps: int) -> set[str]:
    """The documents whose tokens the first `steps` steps of `stream` trained on (document i is the word w<i>)."""
    tokenizer, seen = stream.tokenizer, set()
    for _ in range(steps):
        input_ids, _, _ = stream.take()
        seen |= {t for t in tokenizer.convert_ids_to_tokens(input_ids.flatten().tolist()) if t.startswith("w")}
    return seen


@pytest.mark.parametrize("shuffle_buffer, lanes", [(0, 4), (16, 4), (50, 3), (7, 1)])
def test_a_continuation_after_next_document_reads_no_document_twice(shuffle_buffer, lanes):
    """A run reads some documents (the shuffle buffer reads ahead of them); its record's next_document, passed as
    --skip-documents to the continuation, must start after every one it trained on."""
    from hf_encoderize.data.packing import LaneStream, data_position

    documents, held_out = [f"w{i}" for i in range(120)], 4

    def stream(skip_documents: int):
        return LaneStream(make_tokenizer(), 8, True, documents, held_out + skip_documents, lanes=list(range(lanes)),
                          total_lanes=lanes, shuffle_buffer=shuffle_buffer, seed=3)

    run = stream(0)
    first = _documents_trained(run, 5)
    position = data_position(run.state_dict(), lanes, 0)
    continuation = stream(position["next_document"])
    second = _documents_trained(continuation, 5)
    assert first and second and not first & second, sorted(first & second)
    assert {f"w{i}" for i in range(held_out)}.isdisjoint(first | second)  # held-out documents never trained on
