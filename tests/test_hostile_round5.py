"""Issue 68 (hostile input, fifth round): a teacher deleted by `--overwrite`, a resume on a changed teacher, edits
carded that were never made, precision recorded but never run, the WordNet script's arguments, a cut teacher met
after cpt, a silently replaced accumulation, unchecked card repo ids, a venv script printing a missing interpreter
and a .txt refusal that never named `--text-unit line`: each refused in one line (exit 2, nothing written) or made
right.

The audit table of every case and the test that covers it is docs/hostile_input.md."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import contrastive_config, interrupt_at_step, make_tokenizer, one_error
from hub_server import make_run_folder
from safetensors.torch import load_file, save_file

from hf_encoderize.cli import main
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.outputs import write_marker

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--max-seq-length", "32", "--batch-size", "4", "--eval-documents", "8", "--save-steps", "100", "--no-progress",
        "--logging-steps", "100", "--eval-steps", "0"]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _docs(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": " ".join(f"w{(7 * d + i) % 120}" for i in range(6 + d % 20))}) + "\n"
                            for d in range(120)))
    return path


def _save_teacher(folder: Path) -> Path:
    """A tiny random sentence-transformers teacher (BERT width 16, mean pooling) saved at `folder`."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel

    torch.manual_seed(1)
    bert = folder.parent / f".{folder.name}-bert"
    BertModel(BertConfig(vocab_size=122, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=64)).save_pretrained(bert)
    tokenizer = make_tokenizer()
    tokenizer.pad_token = "<unk>"
    tokenizer.save_pretrained(bert)
    SentenceTransformer(modules=[models.Transformer(str(bert)), models.Pooling(16, "mean")],
                        device="cpu").save(str(folder))
    shutil.rmtree(bert)
    return folder


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    return _save_teacher(tmp_path_factory.mktemp("teacher") / "teacher")


def _distill_argv(encoder, text, out, teacher, *extra):
    return ["contrastive", str(encoder), "--method", "distill", "--teacher", str(teacher), "--data-files", str(text),
            "--output-dir", str(out), "--max-steps", "2", "--batch-size", "8", "--max-seq-length", "16",
            "--no-progress", *extra]


# ------------------------------------------------------------------------------------------------ 1. data loss


@pytest.mark.parametrize("where", ["the output folder itself", "inside the output folder"])
def test_a_teacher_in_the_output_position_is_never_deleted(where, encoder, text, teacher, tmp_path, capsys):
    """`contrastive --teacher T --output-dir T --overwrite` (T an embedding model of ours) trained from T, then
    removed it and wrote the student there; the teacher was counted among no command's inputs."""
    if where == "the output folder itself":
        out = given = shutil.copytree(teacher, tmp_path / "T")
        write_marker(given, "contrastive")  # ours: --overwrite would replace it
    else:
        out = tmp_path / "out"
        given = shutil.copytree(teacher, out / "teacher")
        write_marker(out, "contrastive", ["teacher"])
    kept = _files(out)
    assert main(_distill_argv(encoder, text, out, given, "--overwrite")) == 2
    one_error(capsys.readouterr().err, str(given), "the input", "apart from the command's inputs")
    assert _files(out) == kept


def test_every_command_reads_its_inputs_from_its_configs_declarations():
    """One rule: a command's inputs are what its configs declare (`INPUTS`, `outputs.inputs_of`), never a list the
    command spells out itself, which is how the teacher came to be left out of contrastive's."""
    spelled = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "hf_encoderize").rglob("*.py"))
               if path.name != "outputs.py" and "input_paths(" in path.read_text()]
    assert spelled == []
    from hf_encoderize.evaluation.config import EvalConfig
    from hf_encoderize.recipes.contrastive import ContrastiveConfig

    assert "teacher" in ContrastiveConfig.INPUTS and "data_dir" in EvalConfig.INPUTS  # run's: its stages' configs


def test_run_overwrite_keeps_a_teacher_the_run_folder_holds(decoder_dir, teacher, tmp_path, capsys):
    """`run --overwrite` on a run whose embedding model is the new run's teacher: cpt's clearing deleted it."""
    out = tmp_path / "run"
    shutil.copytree(teacher, out / "contrastive")
    write_marker(out / "contrastive", "contrastive")
    write_marker(out, "cpt", ["contrastive"])
    kept = _files(out)
    argv = ["run", str(decoder_dir), "--data-files", str(_docs(tmp_path / "docs.jsonl")), "--output-dir", str(out),
            "--overwrite", "--max-steps", "1", *TINY, "--eval-profile", "none", "--contrastive", "distill",
            "--contrastive-teacher", str(out / "contrastive"), "--contrastive-max-steps", "1"]
    assert main(argv) == 2
    one_error(capsys.readouterr().err, "holds the input", str(out / "contrastive"))
    assert _files(out) == kept


def test_run_refuses_the_contrastive_stage_replacing_its_own_teacher_before_cpt(decoder_dir, teacher, tmp_path,
                                                                                capsys):
    """Without --overwrite the stage still replaces OUT/contrastive: a teacher there is refused before cpt trains."""
    out = tmp_path / "run"
    shutil.copytree(teacher, out / "contrastive")
    kept = _files(out)
    argv = ["run", str(decoder_dir), "--data-files", str(_docs(tmp_path / "docs.jsonl")), "--output-dir", str(out),
            "--max-steps", "1", *TINY, "--eval-profile", "none", "--contrastive", "distill",
            "--contrastive-teacher", str(out / "contrastive"), "--contrastive-max-steps", "1"]
    assert main(argv) == 2
    one_error(capsys.readouterr().err, "contrastive stage's folder", "is the input")
    assert _files(out) == kept


# ------------------------------------------------------------------------------------------------ 2, 3. wrong results


def test_a_resume_on_a_teacher_changed_in_place_is_refused(encoder, text, teacher, tmp_path):
    """The teacher was compared by its path: 5 steps on one teacher's labels, then the rest on another's."""
    mine = shutil.copytree(teacher, tmp_path / "T")
    out = tmp_path / "out"
    config = contrastive_config(encoder, text, out, method="distill", teacher=str(mine))
    with interrupt_at_step(3), pytest.raises(KeyboardInterrupt, match="--resume"):  # after the step-2 checkpoint
        from hf_encoderize.recipes.contrastive import contrastive

        contrastive(config)
    weights = load_file(mine / "model.safetensors")
    first = sorted(weights)[0]
    save_file({**weights, first: weights[first] + 0.01}, mine / "model.safetensors")  # same path, other weights
    with pytest.raises(EncoderizeError, match="--resume with other settings than the run's \\(teacher was 'sha256:"):
        contrastive(contrastive_config(encoder, text, out, method="distill", teacher=str(mine), resume=True))
    assert not out.exists()


def test_an_edit_option_that_made_nothing_warns_and_is_carded_as_made(encoder, text, teacher, tmp_path, capsys):
    """`--distill-synonyms 3` on texts without a near-synonym (w12-style tokens: no word of 3+ letters) made 0 edits,
    said nothing, and the card claimed "3 near-synonym edit(s) of each"."""
    out = tmp_path / "out"
    assert main(_distill_argv(encoder, text, out, teacher, "--distill-synonyms", "3")) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: --distill-syn")]
    assert len(warnings) == 1 and "made no edit" in warnings[0], warnings
    stage = json.loads((out / "contrastive_run.json").read_text())["stage"]
    assert stage["distill_synonyms"] == 3 and stage["distill_synonym_edits"] == 0
    assert main(["card", str(out)]) == 0
    assert "near-synonym edit" not in (out / "README.md").read_text()


@pytest.mark.skipif(torch.cuda.is_available() or torch.backends.mps.is_available(), reason="fp16 runs on this device")
def test_fp16_on_a_cpu_is_refused_in_one_line(decoder_dir, tmp_path, capsys):
    """`cpt --mixed-precision fp16` on a CPU trained in fp32 (losses bit-identical) while record and card said fp16."""
    out = tmp_path / "out"
    argv = ["cpt", str(decoder_dir), "--data-files", str(_docs(tmp_path / "docs.jsonl")), "--output-dir", str(out),
            "--max-steps", "1", *TINY, "--mixed-precision", "fp16"]
    assert main(argv) == 2
    one_error(capsys.readouterr().err, "--mixed-precision fp16", "bf16 or no")
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ 5, 6, 12. WordNet

WORDNET_HEADER = "  1 This software and database is being provided to you, the LICENSEE, by Princeton University\n"


def _wordnet(folder: Path) -> Path:
    folder.mkdir()
    for part in ("noun", "verb", "adj", "adv"):
        (folder / f"data.{part}").write_text(WORDNET_HEADER + f'0000{len(part)} 05 n 01 car 0 000 | a vehicle; '
                                             f'"he needs a {part} to get to work"\n', encoding="latin-1")
    return folder


@pytest.mark.parametrize("args, needles", [
    (["--exclude", "held-out-typo.jsonl"], ["--exclude", "held-out-typo.jsonl", "no such file"]),
    (["--count", "-5"], ["--count -5", "1 or more"]),
    (["--count", "0"], ["--count 0", "1 or more"]),
    (["--output", "no/such/dir/s.jsonl"], ["no/such/dir", "does not exist"]),
], ids=["a missing exclude file", "count -5", "count 0", "a missing output folder"])
def test_wordnet_sentences_refuses_bad_arguments_in_one_line(args, needles, tmp_path):
    """A missing --exclude was skipped (benchmark sentences could enter training), --count -5 wrote 1,195 sentences,
    --count 0 an empty file, and a missing output folder was a FileNotFoundError traceback."""
    folder = _wordnet(tmp_path / "wordnet")
    argv = [str(folder), "--output", "s.jsonl", *args]
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "wordnet_sentences.py"), *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    one_error(done.stderr, *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wordnet"]  # nothing written


# ------------------------------------------------------------------------------------------------ 9. later stages


def test_run_refuses_a_cut_teacher_before_cpt(decoder_dir, teacher, tmp_path, capsys):
    """`run --contrastive distill --contrastive-teacher CUT` (truncated weights): cpt trained first, then the stage
    refused."""
    cut = shutil.copytree(teacher, tmp_path / "cut")
    weights = cut / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    out = tmp_path / "run"
    argv = ["run", str(decoder_dir), "--data-files", str(_docs(tmp_path / "docs.jsonl")), "--output-dir", str(out),
            "--max-steps", "1", *TINY, "--eval-profile", "none", "--contrastive", "distill",
            "--contrastive-teacher", str(cut), "--contrastive-max-steps", "1"]
    assert main(argv) == 2
    one_error(capsys.readouterr().err, f"--contrastive-teacher {str(cut)!r}", "model.safetensors",
              "re-download or re-save")  # the flag `run` was given
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ 13, 14, 15, 18


def test_tokens_per_step_beside_another_accumulation_is_refused_naming_both(decoder_dir, tmp_path, capsys):
    """`--tokens-per-step 64 --gradient-accumulation-steps 4`: the explicit 4 was silently replaced by 1."""
    from hf_encoderize.training.engine.accelerator import resolve_grad_accum
    from hf_encoderize.training.train_config import TrainConfig

    out = tmp_path / "out"
    argv = ["cpt", str(decoder_dir), "--data-files", str(_docs(tmp_path / "docs.jsonl")), "--output-dir", str(out),
            "--max-steps", "1", *TINY, "--tokens-per-step", "64", "--gradient-accumulation-steps", "4"]
    assert main(argv) == 2
    one_error(capsys.readouterr().err, "--tokens-per-step 64", "--gradient-accumulation-steps 4", "drop one")
    assert not out.exists()
    # the accumulation the target gives (a replayed run_settings.json holds both, as resolved) is the same run
    assert resolve_grad_accum(TrainConfig(batch_size=4, grad_accum=4, tokens_per_step=512), 32).grad_accum == 4


@pytest.mark.parametrize("flag", ["--model-id", "--base-model-id"])
def test_card_refuses_a_repo_id_push_would_refuse(flag, tmp_path, capsys):
    """`card --model-id "bad id!"` wrote snippets loading `from_pretrained("bad id!")`; `push` refuses that id."""
    out = make_run_folder(tmp_path)
    kept = _files(out)
    assert main(["card", str(out), flag, "bad id!"]) == 2
    one_error(capsys.readouterr().err, flag, "invalid Hub repo id 'bad id!'")
    assert _files(out) == kept
    assert main(["push", str(out), "bad id!", "--dry-run"]) == 2  # push's own wording, from the one check
    one_error(capsys.readouterr().err, "invalid Hub repo id 'bad id!'")


def _venv_script(tmp_path, python: str):
    env = {**os.environ, "PYTHON": python, "HF_ENCODERIZE_VENV": str(tmp_path / "env")}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(["bash", str(ROOT / "scripts" / "venv_python.sh")], env=env, capture_output=True, text=True,
                          timeout=60)


# A Python stand-in whose `-m venv` "succeeds" but makes no interpreter.
EMPTY_VENV_PYTHON = """#!/usr/bin/env bash
if [ "$1" = -c ]; then case "$2" in *base_prefix*) echo False ;; *) echo /usr/bin/python3 ;; esac; exit 0; fi
if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "$3/bin"; exit 0; fi
exit 1
"""


@pytest.mark.parametrize("python", ["/bin/true", "a venv without an interpreter"])
def test_venv_python_prints_only_an_interpreter_that_runs(python, tmp_path):
    """`PYTHON=/bin/true bash scripts/venv_python.sh` exited 0 printing a `.../bin/python` that did not exist;
    setup.sh then stopped with exit 127 and no `error:` line."""
    if python != "/bin/true":
        python = str(tmp_path / "python3")
        Path(python).write_text(EMPTY_VENV_PYTHON)
        Path(python).chmod(0o755)
    done = _venv_script(tmp_path, python)
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    one_error(done.stderr, "Python" if python == "/bin/true" else "virtual environment")
    assert not (tmp_path / "env").exists()  # what the script made goes


def test_a_txt_corpus_without_blank_lines_names_text_unit_line(decoder_dir, tmp_path, capsys):
    """A .txt corpus with no blank line is one document under --text-unit paragraph; its refusal ("no training
    documents after the 1 held out") never named --text-unit line, the one change that makes it work."""
    corpus = tmp_path / "lines.txt"
    corpus.write_text("".join(f"line {i} of the corpus with w{i % 50} and w{(3 * i) % 50}\n" for i in range(80)))
    argv = ["cpt", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(tmp_path / "out"),
            "--max-steps", "1", "--max-seq-length", "32", "--batch-size", "2", "--no-progress", "--save-steps", "100"]
    assert main(argv) == 2
    one_error(capsys.readouterr().err, "1 document(s) under --text-unit paragraph", "--text-unit line")
    assert not (tmp_path / "out").exists()
    assert main([*argv, "--text-unit", "line"]) == 0  # the hint is the fix
