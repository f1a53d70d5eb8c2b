"""Gradio Space: explore the embeddings of an encoder made with hf-encoderize.

Design choices:
- Self-contained: imports only torch, transformers, sentence-transformers and gradio (see requirements.txt), so the
  same file runs as a Hugging Face Space and under `hf-encoderize space OUTPUT_DIR` on a laptop.
- Which encoder: the ENCODER_MODEL environment variable (Hub id or encoder folder; `hf-encoderize space` passes the
  run folder's encoder/ here), else `space_config.json` next to this file (written by `hf-encoderize push-space`),
  else the quickstart's encoder folder.
- Two models, one job each. The embedding tabs (Similarity, Semantic search, Embeddings, Compare) use the embedding
  model: EMBEDDING_MODEL (Hub id or folder), else space_config.json's `embedding_model` when the encoder comes from
  there too, else the encoder itself. That is the `contrastive` stage's sentence-transformers folder when a run has
  one (it has no MLM head), so Fill-mask always uses the encoder. EMBEDDING_MODEL=encoder opts out: the encoder makes
  the embeddings.
- An embedding model trained with Matryoshka sizes (`contrastive --matryoshka-dims`) gets a size picker on each
  embedding tab: the full vector and each trained size, no other (space_compute.py says where the sizes come from).
- Embeddings are sentence-transformers' vectors with the model's own pooling (mean for an encoder as `save_encoder`
  writes it) and, in Semantic search, its saved "query"/"document" prompts. The Compare tab runs the base decoder
  (BASE_MODEL, else the `hf_encoderize` metadata in the encoder's config.json) as it was trained, causally, with mean
  pooling, so the difference on screen is the one this project makes.
- Fill-mask runs the encoder's `modeling_encoderize.py` only when it is the file hf-encoderize writes: the template with
  its one `MODEL_TYPE = '...'` line filled in, so putting the placeholder back must give a digest in
  TRUSTED_MODELING_SHA256 (kept here, since this file runs without hf_encoderize installed; a test fails when the
  template changes and it does not). ENCODER_TRUST_REMOTE_CODE=1 (`hf-encoderize space --trust-remote-code`) runs an
  edited file too. The bytes that were checked are the bytes executed (not re-read by `trust_remote_code=True`), so
  nothing can swap the file, auto_map or an adapter redirect in between. Otherwise the tab says why fill-mask is off.
  Native MLM heads (e.g. BERT's) load without remote code; embeddings and Compare never run remote code.
- Every tab is an API endpoint with a name (`/similarity`, `/search`, `/embed`, `/fill_mask`, `/compare`) and named
  outputs, so the Space's API page and `gradio_client` read as the tabs do. `/embed` returns the vectors themselves,
  exactly as sentence-transformers' `encode` gives them, with the model, its pooling and the dimension.
- The size picker's values are strings ("0" for the full vector, "16"...): Gradio's API schema declares a dropdown's
  values as strings, so a client built from the schema sends what the server accepts.
- Models load on first use, once, so the Space starts in seconds and an unused tab costs nothing.
- Inputs are capped (texts, characters, top-k) with a friendly message, so a public Space cannot be exhausted.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import gradio as gr

# The sibling modules, found next to this file also when it is imported by path: pure computations (no gradio) and
# the loading side (settings, the trust check, the models). Their names are this module's too (`app.Models`).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from space_compute import (  # noqa: E402
    APP_CSS,
    base_label,
    causal_embeddings,
    cosine_matrix,
    encode,
    first_line,
    first_token_shift,
    heatmap_html,
    is_normalized,
    pooling_mode,
    recorded,
)
from space_models import (  # noqa: E402, F401 (re-exported: the UI's callers and tests read them off app)
    MODELING_FILE,
    REMOTE_MLM_CLASS,
    TRUST_HINT,
    TRUSTED_MODELING_SHA256,
    FillMaskOff,
    Models,
    Settings,
    checked_modeling_source,
    masked_lm_head,
    mlm_mode,
    modeling_file,
    modeling_sha256,
    run_module,
)

# The quickstart's outputs: `hf-encoderize quickstart` (a run folder) and examples/quickstart.sh (a converted encoder).
DEFAULT_ENCODERS = ("runs/quickstart/encoder", "encoders/smollm2-135m-encoder")
# A bare `python space/app.py` beside a quickstart run embeds with its embedding model, as `hf-encoderize space
# runs/quickstart` does: the MLM encoder alone ranks "Stock markets fell" above the kitten paraphrase (0.679 / 0.545).
DEFAULT_EMBEDDING = {"runs/quickstart/encoder": "runs/quickstart/contrastive"}
SPACE_CONFIG = Path(__file__).with_name("space_config.json")

MAX_TEXTS = 12  # sentences per Similarity / Compare request
MAX_PASSAGES = 50  # passages in the Semantic search corpus
MAX_CHARS = 500  # characters per sentence, passage or query
MAX_TOP_K = 20

# A query, its paraphrase, a sentence on its topic that means something else, and an unrelated one (the same four as
# hf_encoderize.publish.paraphrases.SPACE_EXAMPLE, whose cosines the quickstart prints for its embedding model).
EXAMPLE_SENTENCES = ("A cat sits on the mat.\nA kitten rests on a rug.\nThe cat chased a mouse across the garden.\n"
                     "Stock markets fell sharply today.")
EXAMPLE_CORPUS = (
    "The cat slept on the warm windowsill all afternoon.\n"
    "Central banks raised interest rates to fight inflation.\n"
    "A small kitten curled up in a sunny spot by the window.\n"
    "The football team won the championship after extra time."
)


def settings_from_env() -> Settings:
    """Environment variables win, then `space_config.json` beside this file, then the quickstart's folder."""
    stored = json.loads(SPACE_CONFIG.read_text()) if SPACE_CONFIG.is_file() else {}
    default = next((path for path in DEFAULT_ENCODERS if Path(path).is_dir()), DEFAULT_ENCODERS[0])
    encoder = os.environ.get("ENCODER_MODEL") or stored.get("encoder") or default
    from_stored = bool(stored.get("encoder")) and not os.environ.get("ENCODER_MODEL")
    if from_stored and (SPACE_CONFIG.parent / encoder).is_dir():
        encoder = str(SPACE_CONFIG.parent / encoder)  # an encoder bundled inside the Space repo
    # The stored embedding model belongs to the stored encoder: another ENCODER_MODEL does not inherit it.
    embedding = os.environ.get("EMBEDDING_MODEL") or (stored.get("embedding_model") if from_stored else None)
    if embedding and not os.environ.get("EMBEDDING_MODEL") and (SPACE_CONFIG.parent / embedding).is_dir():
        embedding = str(SPACE_CONFIG.parent / embedding)  # bundled inside the Space repo (contrastive/)
    paired = DEFAULT_EMBEDDING.get(encoder) if encoder == default and not from_stored else None
    if embedding is None and paired and Path(paired).is_dir():
        embedding = paired  # the quickstart's own embedding model, found beside its encoder
    return Settings(
        encoder=encoder,
        embedding_model=None if embedding == "encoder" else embedding,  # "encoder": opt out, the encoder embeds
        base_model=os.environ.get("BASE_MODEL") or stored.get("base_model"),
        base_gguf_file=os.environ.get("BASE_GGUF_FILE") or stored.get("base_gguf_file"),
        base_revision=os.environ.get("BASE_REVISION") or stored.get("base_revision"),
        trust_remote_code=os.environ.get("ENCODER_TRUST_REMOTE_CODE", "").lower() in ("1", "true"),
    )


# ------------------------------------------------------------------------------------------------ computations


def parse_lines(text: str, what: str, limit: int) -> list[str]:
    """Non-empty lines of `text`, refused with a friendly message past the Space's limits."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        raise gr.Error(f"Type at least one {what}, one per line.")
    if len(lines) > limit:
        raise gr.Error(f"This Space takes at most {limit} {what}s per request; you gave {len(lines)}.")
    check_length(lines, what)
    return lines


def check_length(texts: list[str], what: str) -> None:
    for number, text in enumerate(texts, 1):
        if len(text) > MAX_CHARS:
            raise gr.Error(f"{what.capitalize()} {number} has {len(text)} characters; the limit is {MAX_CHARS}.")


# ------------------------------------------------------------------------------------------------ the tabs


class EncoderSpace:
    """One method per tab; each takes and returns what its Gradio components show."""

    def __init__(self, models: Models):
        self.models = models

    def similarity(self, text: str, dim: str = "0"):
        """Cosine similarity of every pair of sentences (one per line), as a heatmap and as JSON."""
        sentences = parse_lines(text, "sentence", MAX_TEXTS)
        dim = self.models.size(dim)
        matrix = cosine_matrix(encode(self.models.embedder(), sentences, truncate_dim=dim))
        name = self.models.embedding_name
        scores = {"sentences": sentences, "similarity": matrix, "model": name, "dimensions": dim or self.models.width}
        return heatmap_html(sentences, matrix, f"{self.models.embedding_title(dim)}: {name}"), scores

    def search(self, corpus: str, query: str, dim: str = "0"):
        """The passages (one per line) ranked by cosine similarity to the query: rank, score, passage."""
        passages = parse_lines(corpus, "passage", MAX_PASSAGES)
        query = (query or "").strip()
        if not query:
            raise gr.Error("Type a query to search the passages.")
        check_length([query], "query")
        import torch

        model, dim = self.models.embedder(), self.models.size(dim)
        vectors = torch.cat([encode(model, [query], "query", dim), encode(model, passages, "document", dim)])
        scores = cosine_matrix(vectors)[0][1:]
        ranked = sorted(zip(scores, passages, strict=True), key=lambda pair: -pair[0])
        return [[rank, round(score, 4), passage] for rank, (score, passage) in enumerate(ranked, 1)]

    def embed(self, text: str, dim: str = "0") -> dict:
        """The embedding of each text (one per line), as sentence-transformers' `encode` gives it (the first `dim`
        values at a Matryoshka size), with the model, its pooling and the vectors' dimension."""
        texts = parse_lines(text, "text", MAX_PASSAGES)
        model, dim = self.models.embedder(), self.models.size(dim)
        vectors = encode(model, texts, truncate_dim=dim)  # (texts, dim or the full width)
        return {"model": self.models.embedding_name, "pooling": pooling_mode(model), "normalized": is_normalized(model),
                "dimension": int(vectors.shape[-1]), "texts": texts, "vectors": vectors.float().cpu().tolist()}

    def fill_mask(self, text: str, top_k: float):
        """The most likely tokens for the one mask token in the sentence, with their probabilities."""
        if self.models.mlm is None:
            raise gr.Error(self.models.mlm_note)
        fill = self.models.fill_mask()
        mask = fill.tokenizer.mask_token
        text = (text or "").strip()
        for alias in ("[MASK]", "<mask>"):
            text = text.replace(alias, mask)
        check_length([text], "sentence")
        if text.count(mask) != 1:
            raise gr.Error(f"Put the mask token {mask} exactly once in the sentence.")
        predictions = fill(text, top_k=max(1, min(int(top_k), MAX_TOP_K)))
        return {p["token_str"].strip() or repr(p["token_str"]): float(p["score"]) for p in predictions}

    def compare(self, text: str, dim: str = "0"):
        """The sentences' cosine heatmaps through the base decoder (causal) and the embedding model, and how far the
        first token's hidden state moves when the last one changes in each."""
        if not self.models.base_available:
            raise gr.Error("No base decoder is available for this encoder; set BASE_MODEL to a Hub id or folder.")
        sentences = parse_lines(text, "sentence", MAX_TEXTS)
        try:
            base_model, base_tokenizer = self.models.base()
        except Exception as err:  # a Hub id that does not exist, no network, a GGUF without the gguf package...
            raise gr.Error(f"Could not load the base decoder {base_label(self.models.settings)}: "
                           f"{first_line(err)}") from err
        encoder, dim = self.models.embedder(), self.models.size(dim)
        base_matrix = cosine_matrix(causal_embeddings(base_model, base_tokenizer, sentences))
        encoder_matrix = cosine_matrix(encode(encoder, sentences, truncate_dim=dim))
        shifts = (first_token_shift(base_model, base_tokenizer, sentences[0]),
                  first_token_shift(encoder[0].auto_model, encoder.tokenizer, sentences[0]))
        note = (f"Change the last word of sentence 1 and the first word's hidden state moves by **{shifts[0]:.4f}** "
                f"in the base decoder (causal: it cannot see ahead) and by **{shifts[1]:.4f}** in the "
                f"{'embedding model' if self.models.settings.embedding_model else 'encoder'}.")
        return (heatmap_html(sentences, base_matrix, f"Base decoder, causal: {base_label(self.models.settings)}"),
                heatmap_html(sentences, encoder_matrix, f"{self.models.embedding_title(dim)}, bidirectional: "
                                                        f"{self.models.embedding_name}"),
                note)


# ------------------------------------------------------------------------------------------------ layout


def build_demo(settings: Settings | None = None) -> gr.Blocks:
    """The five tabs, wired to an `EncoderSpace` for `settings` (default: from the environment)."""
    space = EncoderSpace(Models(settings or settings_from_env()))
    with gr.Blocks(title="hf-encoderize: encoder demo", analytics_enabled=False) as demo:
        gr.Markdown(_intro(space.models), elem_id="intro")
        with gr.Tab("Similarity"):
            _similarity_tab(space)
        with gr.Tab("Semantic search"):
            _search_tab(space)
        with gr.Tab("Embeddings"):
            _embed_tab(space)
        with gr.Tab("Fill-mask"):
            _fill_mask_tab(space)
        with gr.Tab("Compare"):
            _compare_tab(space)
    return demo


def _intro(models: Models) -> str:
    made = getattr(models.config, "hf_encoderize", None)
    base = base_label(models.settings) or "a decoder LLM"
    origin = f"a bidirectional encoder made from **{base}** with hf-encoderize" if made else "an encoder"
    if not models.settings.embedding_model:
        return (f"# Encoder demo\nEmbeddings of **{models.settings.encoder}**, {origin}. "
                "Sentences are mean-pooled into one vector each and compared by cosine similarity.")
    pooling = recorded(models.contrastive, "ContrastiveStage", "pooling") or "its own"
    return (f"# Encoder demo\n**embedding model: {models.embedding_label}** ({models.settings.embedding_model}) "
            f"makes the embeddings of Similarity, Semantic search, Embeddings and Compare ({pooling} pooling, "
            "cosine similarity). "
            f"Fill-mask uses the MLM encoder **{models.settings.encoder}**, {origin}." + _sizes_line(models))


def _sizes_line(models: Models) -> str:
    trained = ", ".join(label for label, _ in models.sizes[1:])
    return f"\n\nTrained with Matryoshka sizes {trained} as well: pick one on each embedding tab." if trained else ""


def _similarity_tab(space: EncoderSpace) -> None:
    gr.Markdown(f"Several sentences, one per line (at most {MAX_TEXTS}, {MAX_CHARS} characters each).")
    sentences = gr.Textbox(value=EXAMPLE_SENTENCES, lines=5, label="Sentences", elem_id="sim-input")
    size = _size_picker(space, "sim-size")
    run = gr.Button("Compute similarity", variant="primary", elem_id="sim-button")
    heatmap = gr.HTML(label="Heatmap", elem_id="sim-heatmap")
    with gr.Accordion("Scores as JSON", open=False):
        scores = gr.JSON(label="Cosine similarity")
    run.click(space.similarity, [sentences, size], [heatmap, scores], api_name="similarity")


def _size_picker(space: EncoderSpace, elem_id: str, info: str = "the first D dimensions, renormalised") -> gr.Dropdown:
    """The Matryoshka size of the embeddings, shown only when the model was trained at sizes below its full one. Its
    values are strings ("0": the full vector), the type Gradio's API schema gives a dropdown (see the docstring)."""
    choices = [(label, str(value)) for label, value in space.models.sizes]
    return gr.Dropdown(choices, value="0", label="Embedding size (dimensions)", elem_id=elem_id,
                       visible=len(choices) > 1, info=f"Matryoshka: {info}.")


def _search_tab(space: EncoderSpace) -> None:
    gr.Markdown(f"A small corpus, one passage per line (at most {MAX_PASSAGES}), and a query.")
    corpus = gr.Textbox(value=EXAMPLE_CORPUS, lines=6, label="Passages", elem_id="search-corpus")
    query = gr.Textbox(value="a cat napping in the sun", label="Query", elem_id="search-query")
    size = _size_picker(space, "search-size")
    run = gr.Button("Search", variant="primary", elem_id="search-button")
    results = gr.Dataframe(headers=["rank", "score", "passage"], label="Ranked passages", interactive=False,
                           elem_id="search-results", wrap=True)
    run.click(space.search, [corpus, query, size], results, api_name="search")


def _embed_tab(space: EncoderSpace) -> None:
    gr.Markdown(f"Texts, one per line (at most {MAX_PASSAGES}), give their embedding vectors as the model's "
                "`encode` does, with the model, its pooling and the dimension. The API's `/embed` returns the same.")
    texts = gr.Textbox(value=EXAMPLE_SENTENCES, lines=5, label="Texts", elem_id="embed-input")
    size = _size_picker(space, "embed-size", info="the first D dimensions, as encode(truncate_dim=D) gives them")
    run = gr.Button("Embed", variant="primary", elem_id="embed-button")
    vectors = gr.JSON(label="Embeddings", elem_id="embed-output")
    run.click(space.embed, [texts, size], vectors, api_name="embed")


def _fill_mask_tab(space: EncoderSpace) -> None:
    mode, note = space.models.mlm, space.models.mlm_note
    if mode is not None:
        note += " Write `[MASK]` or `<mask>` where a word is missing."
    if mode == "remote" and "steps" not in (getattr(space.models.config, "hf_encoderize", None) or {}):
        note += ("\n\nThis encoder was converted without MLM training (`convert`), so its head still guesses the "
                 "*next* token; `hf-encoderize cpt` trains it to fill the mask.")
    gr.Markdown(note, elem_id="mask-note")
    text = gr.Textbox(value="The capital of France is [MASK].", label="Sentence", elem_id="mask-input")
    top_k = gr.Slider(1, MAX_TOP_K, value=5, step=1, label="Top-k tokens")
    run = gr.Button("Fill the mask", variant="primary", elem_id="mask-button", interactive=mode is not None)
    output = gr.Label(label="Most likely tokens", elem_id="mask-output")
    run.click(space.fill_mask, [text, top_k], output, api_name="fill_mask")


def _compare_tab(space: EncoderSpace) -> None:
    s = space.models.settings
    if space.models.base_available:
        other = (f"the embedding model ({space.models.embedding_label})" if s.embedding_model else
            "the encoder; both mean-pooled")
        gr.Markdown(f"The same sentences through the base decoder **{base_label(s)}**, run causally as it was "
                    f"trained and mean-pooled, and through {other}. This is why hf-encoderize exists.")
    else:
        reason = f"the recorded base {s.base_model!r} is not on this machine" if s.base_model else "none is recorded"
        gr.Markdown(f"**No base decoder available** ({reason}). Set the BASE_MODEL environment variable to a Hub "
                    "id or folder to compare the encoder with the decoder it came from.")
    if space.models.record_note:
        gr.Markdown(f"**Note:** {space.models.record_note}, so the base decoder comes from config.json.",
                    elem_id="record-note")
    sentences = gr.Textbox(value=EXAMPLE_SENTENCES, lines=5, label="Sentences", elem_id="compare-input")
    size = _size_picker(space, "compare-size")
    run = gr.Button("Compare", variant="primary", elem_id="compare-button", interactive=space.models.base_available)
    with gr.Row():
        base = gr.HTML(label="Base decoder heatmap", elem_id="compare-base")
        encoder = gr.HTML(label="Bidirectional heatmap", elem_id="compare-encoder")
    note = gr.Markdown(label="First-token shift", elem_id="compare-note")
    run.click(space.compare, [sentences, size], [base, encoder, note], api_name="compare")


def theme():
    # System fonts only: a Space or an offline laptop never waits on a web-font download.
    return gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                             font_mono=["ui-monospace", "monospace"])


if __name__ == "__main__":
    build_demo().launch(theme=theme(), css=APP_CSS)
