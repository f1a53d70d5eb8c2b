"""The base model's license and languages, for the model card's metadata: read from its own card (a local README or
the Hub's), or from a GGUF file's `general.license` metadata. Every lookup is best effort: an unreadable source
leaves the license unknown rather than failing the card."""

from __future__ import annotations

from pathlib import Path


def base_license(source: str, gguf_file: str | None, base_id: str | None, revision: str | None):
    """(license, languages) of the base model: local README, GGUF metadata, Hub cache, then the Hub; None if unknown."""
    local = Path(source)
    if (local / "README.md").is_file():
        found = card_license(local / "README.md")
        if found[0]:
            return found
    if gguf_file and (local / gguf_file).is_file():
        found = gguf_license(local / gguf_file)
        if found[0]:
            return found
    return hub_license(base_id, revision) if base_id else (None, None)


def card_license(readme: Path):
    from huggingface_hub import ModelCard

    try:
        data = ModelCard.load(readme, ignore_metadata_errors=True).data
    except Exception:  # an unreadable base card only costs us the license line
        return None, None
    language = data.language
    return data.license, [language] if isinstance(language, str) else language


def gguf_license(path: Path):
    try:
        from gguf import GGUFReader

        fields = GGUFReader(path).fields
    except Exception:  # gguf missing or file unreadable: the license stays unknown
        return None, None

    def value(key):
        return fields[key].contents() if key in fields else None

    languages = value("general.languages")
    return value("general.license"), list(languages) if languages else None


def hub_license(repo_id: str, revision: str | None):
    from huggingface_hub import constants, try_to_load_from_cache

    cached = try_to_load_from_cache(repo_id, "README.md", revision=revision)
    if isinstance(cached, str):
        return card_license(Path(cached))
    if constants.is_offline_mode():
        return None, None
    from huggingface_hub import hf_hub_download

    try:
        return card_license(Path(hf_hub_download(repo_id, "README.md", revision=revision)))
    except Exception:  # private, gated, no card, or no network: the license stays unknown
        return None, None
