"""The Gradio Space in a real headless Chromium, read from the page as a person reads it: the real all-MiniLM-L6-v2
ranks paraphrases above an unrelated sentence (Similarity, Semantic search), the tiny encoder with all-MiniLM-L6-v2 as
its `--embedding-model` ranks the paraphrase of every held-out triple (publish/paraphrases.py) first, and a Matryoshka
run offers exactly its trained sizes. The HTTP API and the library are tests/test_space.py.
Screenshots go to $SPACE_SCREENSHOTS (default: a pytest tmp folder).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("gradio", reason="the Space needs gradio: pip install 'hf-encoderize[space]'")

from hf_encoderize.publish.space import SpaceConfig, launch_space, load_app  # noqa: E402

# gradio's queue calls pandas APIs that pandas 3 deprecates; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")

PARAPHRASES = ["A man is playing a guitar.", "Someone plays an acoustic guitar."]
UNRELATED = "The stock market crashed yesterday."


@pytest.fixture(scope="module")
def minilm_url(minilm_dir):
    demo, url = launch_space(SpaceConfig(str(minilm_dir), port=0), block=False)
    yield url
    demo.close()


def _browser() -> str:
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("playwright is not installed; scripts/setup.sh installs it (pip install playwright)")
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.skip("no Chromium found; scripts/setup.sh installs Debian's chromium when run as root")
    return path


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    executable = _browser()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield browser.new_page(viewport={"width": 1200, "height": 900})
        browser.close()


@pytest.fixture
def screenshots(tmp_path):
    folder = Path(os.environ.get("SPACE_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_browser_paraphrases_rank_above_the_unrelated_sentence(page, minilm_url, screenshots):
    page.goto(minilm_url)
    page.locator("#sim-input textarea").fill("\n".join([*PARAPHRASES, UNRELATED]))
    page.locator("#sim-button").click()
    cells = page.locator("#sim-heatmap td.score")
    cells.nth(8).wait_for(timeout=60_000)
    scores = [[float(cells.nth(3 * i + j).get_attribute("data-score")) for j in range(3)] for i in range(3)]
    assert scores[0][0] == pytest.approx(1.0, abs=1e-3) and scores[0][1] == pytest.approx(scores[1][0], abs=1e-4)
    assert scores[0][1] > 0.5 > max(scores[0][2], scores[1][2])  # paraphrases close, the unrelated one far
    assert cells.nth(1).inner_text() == f"{scores[0][1]:.2f}"  # the number a person reads in the heatmap
    page.screenshot(path=screenshots / "space_similarity.png", full_page=True)

    page.get_by_role("tab", name="Semantic search").click()
    page.locator("#search-corpus textarea").fill("\n".join([UNRELATED, *PARAPHRASES]))
    page.locator("#search-query input, #search-query textarea").first.fill("a person playing guitar")
    page.locator("#search-button").click()
    rows = page.locator("#search-results [role=row]:has([role=gridcell])")  # ARIA grid: stable across versions
    rows.nth(2).wait_for(timeout=60_000)
    ranked = [rows.nth(i).locator("[role=gridcell]").all_inner_texts() for i in range(3)]
    assert [r[0].strip() for r in ranked] == ["1", "2", "3"]
    assert {ranked[0][2].strip(), ranked[1][2].strip()} == set(PARAPHRASES) and ranked[2][2].strip() == UNRELATED
    assert float(ranked[1][1]) > float(ranked[2][1])
    page.screenshot(path=screenshots / "space_search.png", full_page=True)

    page.get_by_role("tab", name="Compare").click()
    assert page.get_by_text("No base decoder available").is_visible()
    assert page.locator("#compare-button").is_disabled()
    page.screenshot(path=screenshots / "space_compare_no_base.png", full_page=True)


@pytest.fixture(scope="module")
def minilm_embeddings_url(tiny_run, minilm_dir):
    """`space tiny_run --embedding-model MINILM`: the tiny encoder keeps Fill-mask, all-MiniLM-L6-v2 embeds."""
    demo, url = launch_space(SpaceConfig(str(tiny_run), embedding_model=str(minilm_dir), port=0), block=False)
    yield url
    demo.close()


def test_browser_similarity_ranks_held_out_paraphrases_first(page, minilm_embeddings_url, minilm_dir, screenshots):
    from sentence_transformers import SentenceTransformer

    from hf_encoderize.publish.paraphrases import HELD_OUT_TRIPLES, ranks_paraphrases_first

    expected = ranks_paraphrases_first(SentenceTransformer(str(minilm_dir), device="cpu"))
    page.goto(minilm_embeddings_url)
    assert not page.locator("#sim-size").is_visible()  # all-MiniLM-L6-v2 was not trained with Matryoshka sizes
    per_request = load_app().MAX_TEXTS // 3
    shown = []  # (anchor, paraphrase, unrelated) scores as the heatmap prints them
    for start in range(0, len(HELD_OUT_TRIPLES), per_request):
        triples = HELD_OUT_TRIPLES[start:start + per_request]
        sentences = [sentence for triple in triples for sentence in triple]
        page.locator("#sim-input textarea").fill("\n".join(sentences))
        page.locator("#sim-button").click()
        labels = page.locator("#sim-heatmap th.row-label")
        labels.nth(len(sentences) - 1).wait_for(timeout=60_000)
        assert labels.evaluate_all("rows => rows.map(row => row.title)") == sentences  # this request's heatmap
        cells, n = page.locator("#sim-heatmap td.score"), len(sentences)
        for k, (anchor, _, _) in enumerate(triples):
            paraphrase, unrelated = cells.nth(3 * k * n + 3 * k + 1), cells.nth(3 * k * n + 3 * k + 2)
            shown.append((anchor, float(paraphrase.inner_text()), float(unrelated.inner_text()),
                          float(paraphrase.get_attribute("data-score")), float(unrelated.get_attribute("data-score"))))
        page.screenshot(path=screenshots / f"space_held_out_{start}.png", full_page=True)
    assert [row[0] for row in shown] == [triple[0] for triple in HELD_OUT_TRIPLES]
    for anchor, paraphrase, unrelated, _, _ in shown:
        assert paraphrase > unrelated, f"{anchor!r}: paraphrase {paraphrase} <= unrelated {unrelated} on the page"
    assert [row[3:] for row in shown] == [pytest.approx(score[1:], abs=1e-3) for score in expected]


def test_browser_matryoshka_size_picker(page, matryoshka_run, screenshots):
    demo, url = launch_space(SpaceConfig(str(matryoshka_run), port=0), block=False)
    try:
        page.goto(url)
        page.locator("#sim-size input").click()
        options = [text.replace("✓", "").strip() for text in page.get_by_role("option").all_inner_texts()]
        assert options == ["32 (full size)", "16", "8"]  # the trained sizes, no other (the first one ticked)
        page.get_by_role("option", name="16", exact=True).click()
        page.locator("#sim-button").click()
        heading = page.locator("#sim-heatmap b")
        heading.wait_for(timeout=60_000)
        assert "(first 16 of 32 dimensions)" in heading.inner_text()
        page.screenshot(path=screenshots / "space_matryoshka.png", full_page=True)
    finally:
        demo.close()
