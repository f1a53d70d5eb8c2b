"""The Space's Matryoshka size picker: an embedding model trained with `contrastive --matryoshka-dims 32,16,8` is
offered at the full size and at each trained size, no other, and its scores at a size are the first D dimensions
renormalised (what `SentenceTransformer(..., truncate_dim=D)` gives); a model without Matryoshka shows no picker."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("gradio", reason="the Space needs gradio: pip install 'hf-encoderize[space]'")

from hf_encoderize.publish.space import SpaceConfig, app_settings, load_app  # noqa: E402

# gradio's queue calls pandas APIs that pandas 3 deprecates; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")

SENTENCES = ["w1 w2 w3", "w4 w5 w6 w7", "w1 w2 w8", "w9 w3 w5"]
PICKERS = ("sim-size", "search-size", "embed-size", "compare-size")


def _space(run):
    app = load_app()
    return app, app.EncoderSpace(app.Models(app_settings(SpaceConfig(str(run)))))


def _pickers(demo) -> dict:
    return {block.elem_id: block for block in demo.blocks.values() if getattr(block, "elem_id", None) in PICKERS}


def _truncated_cosines(folder, dim: int | None) -> torch.Tensor:
    """Independently of the app: full embeddings, their first `dim` values, normalised again, all pairs' cosines."""
    from sentence_transformers import SentenceTransformer

    full = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES, convert_to_tensor=True)  # (4, 32)
    unit = torch.nn.functional.normalize(full[:, :dim].float(), dim=-1)
    return unit @ unit.T


def test_picker_offers_the_full_size_and_each_trained_size(matryoshka_run):
    app, space = _space(matryoshka_run)
    assert space.models.sizes == [("32 (full size)", 0), ("16", 16), ("8", 8)]
    pickers = _pickers(app.build_demo(space.models.settings))
    assert set(pickers) == set(PICKERS)  # Similarity, Semantic search, Embeddings and Compare each have one
    for picker in pickers.values():  # strings: the type Gradio's API schema declares for a dropdown's values
        assert picker.visible and picker.value == "0" and [value for _, value in picker.choices] == ["0", "16", "8"]


def test_similarity_at_a_size_is_the_first_dims_renormalised(matryoshka_run):
    _, space = _space(matryoshka_run)
    heatmap, scores = space.similarity("\n".join(SENTENCES), 16)
    expected = _truncated_cosines(matryoshka_run / "contrastive", 16)
    assert torch.tensor(scores["similarity"]) == pytest.approx(expected, abs=1e-5)
    full = torch.tensor(space.similarity("\n".join(SENTENCES), 0)[1]["similarity"])
    assert full == pytest.approx(_truncated_cosines(matryoshka_run / "contrastive", None), abs=1e-5)
    assert (full - expected).abs().max() > 1e-3  # a size really changes the scores
    assert scores["dimensions"] == 16 and "(first 16 of 32 dimensions)" in heatmap  # the size is on screen
    assert "(all 32 dimensions)" in space.similarity("w1\nw2", 0)[0]

    rows = space.search("\n".join(SENTENCES[1:]), SENTENCES[0], 8)  # search and Compare truncate the same way
    by_passage = {row[2]: row[1] for row in rows}
    eight = _truncated_cosines(matryoshka_run / "contrastive", 8)[0, 1:].tolist()
    assert by_passage == pytest.approx(dict(zip(SENTENCES[1:], eight, strict=True)), abs=1e-4)
    _, encoder, _ = space.compare("\n".join(SENTENCES), 8)
    assert "(first 8 of 32 dimensions)" in encoder


def test_an_untrained_size_is_refused(matryoshka_run):
    import gradio as gr

    _, space = _space(matryoshka_run)
    with pytest.raises(gr.Error, match="32 \\(full size\\), 16, 8"):
        space.similarity("w1\nw2", 12)


def test_no_matryoshka_no_picker(contrastive_run, tiny_run):
    for run in (contrastive_run, tiny_run):  # a contrastive model trained without sizes, and an encoder alone
        app, space = _space(run)
        assert space.models.sizes == [("32 (full size)", 0)]
        assert not any(picker.visible for picker in _pickers(app.build_demo(space.models.settings)).values())
        heatmap, scores = space.similarity("w1 w2\nw3 w4", 0)
        assert "dimensions" not in heatmap and scores["dimensions"] == 32
        with pytest.raises(Exception, match="trained at: 32 \\(full size\\)"):
            space.similarity("w1\nw2", 16)


def test_the_api_takes_the_size(matryoshka_run):
    from gradio_client import Client

    from hf_encoderize.publish.space import launch_space

    demo, url = launch_space(SpaceConfig(str(matryoshka_run), port=0), block=False)
    try:
        client = Client(url, verbose=False)
        _, scores = client.predict("\n".join(SENTENCES), "8", api_name="/similarity")  # the schema's string
        _, default = client.predict("\n".join(SENTENCES), api_name="/similarity")  # the picker's default: full size
    finally:
        demo.close()
    expected = _truncated_cosines(matryoshka_run / "contrastive", 8)
    assert torch.tensor(scores["similarity"]) == pytest.approx(expected, abs=1e-5) and scores["dimensions"] == 8
    assert default["dimensions"] == 32
