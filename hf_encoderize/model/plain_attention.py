"""What plain transformers does with a saved encoder of a model type: which attention backends honour `is_causal=False`.

Some classes stay causal under sdpa in plain hands (their sdpa path passes `is_causal=True` itself, e.g. StableLM), so
`save_encoder` asks `plain_attention` for the verdicts and pins `saved_backend` as the saved default whenever a backend
was not verified bidirectional (eager for StableLM; eager for GPT-Neo, whose sdpa did not exist when it was saved), and
records the transformers release the verdicts ran on: a later release must not pick a backend never verified. The
verdicts come from a fresh, unpatched tiny model (`tiny.tiny_config`), not from ours.
"""

from __future__ import annotations

import torch


def plain_attention(model_type: str, backends=("sdpa", "eager")) -> dict[str, bool | str]:
    """backend -> True when a fresh, unpatched tiny model of `model_type` with `is_causal=False` attends
    bidirectionally under it (with no mask, and with an all-ones mask, which transformers also skips), False when it
    stays causal, or the reason it could not be told (an architecture the tiny builder cannot shrink)."""
    from transformers import AutoModelForCausalLM

    from hf_encoderize.model.tiny import tiny_config

    verdicts = {}
    for backend in backends:
        try:
            config = tiny_config(model_type)
            config.is_causal = False
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(config, attn_implementation=backend).float().eval()
            verdicts[backend] = _later_token_moves_first(model)
        except Exception as err:  # not a verdict: the card then says "not verified"
            verdicts[backend] = f"not verified ({type(err).__name__})"
    return verdicts


@torch.no_grad()
def _later_token_moves_first(model) -> bool:
    text = model.config.get_text_config()
    window = min([w for w in (getattr(text, "sliding_window", None), getattr(text, "attention_chunk_size", None))
                  if isinstance(w, int) and w > 0] or [8])
    length = min(8, window)
    vocab = int(getattr(text, "vocab_size", 256) or 256)
    ids = torch.randint(3, vocab, (1, length), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] + 1) % vocab
    for extra in ({}, {"attention_mask": torch.ones_like(ids)}):
        first = model(input_ids=ids, use_cache=False, output_hidden_states=True, **extra).hidden_states[-1][0, 0]
        moved = model(input_ids=changed, use_cache=False, output_hidden_states=True, **extra).hidden_states[-1][0, 0]
        if float((first - moved).abs().max()) <= 1e-6:
            return False
    return True


def saved_backend(verdicts: dict[str, bool | str]) -> str | None:
    """The backend to write into the saved config.json. None (transformers' own default) only when every backend
    asked was verified bidirectional; otherwise the first verified one (sdpa before eager), or, when none was, the
    first that ran at all (GPT-Neo: eager, causal in plain hands and declared so; the remote code patches it). A
    verdict holds for the transformers release it ran on: left unpinned, a later release that gives the class a new
    kernel (GPT-Neo's sdpa in 5.24) would load with a backend never verified.

    >>> saved_backend({"sdpa": True, "eager": True}) is None
    True
    >>> saved_backend({"sdpa": False, "eager": True})
    'eager'
    >>> saved_backend({"sdpa": "not verified (ValueError)", "eager": True})
    'eager'
    >>> saved_backend({"sdpa": "not verified (ValueError)", "eager": False})
    'eager'
    """
    if all(verdict is True for verdict in verdicts.values()):
        return None
    verified = [backend for backend, verdict in verdicts.items() if verdict is True]
    ran = [backend for backend, verdict in verdicts.items() if isinstance(verdict, bool)]
    return (verified or ran or [None])[0]

