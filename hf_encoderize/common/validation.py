"""One check for every numeric option (and for every Hub repo id), used by the config dataclasses' `__post_init__`.

Why one helper: `float("nan")` and `float("inf")` parse as floats, and NaN compares false with everything, so a
check like `if lr <= 0: refuse` lets NaN through. `check_number` first requires a finite number, then the bounds,
and always says the same thing: `--learning-rate must be a finite number above 0, got nan`. Every float and int field
of every
command's config calls it in `__post_init__` with the bounds that say what is allowed (tests/test_number_checks.py
derives its table from the dataclasses, so a new field without a check fails there).

A whole number is also held to int64 (`INT64_MAX`) unless a lower `maximum` is given: argparse turns any digits into a
Python int, and one past int64 overflows the first tensor, seed or OS call that takes it, as a traceback.
"""

from __future__ import annotations

import math
import operator

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.options import choices_of, public_flag

INT64_MAX = 2**63 - 1
"""The largest whole number a tensor, numpy or the OS takes; the default `maximum` of `integer=True`."""
_BOUNDS = (("minimum", "at least", operator.ge), ("above", "above", operator.gt),
           ("maximum", "at most", operator.le), ("below", "below", operator.lt))


def check_number(flag: str, value, *, minimum: float | None = None, above: float | None = None,
                 maximum: float | None = None, below: float | None = None, integer: bool = False) -> None:
    """Refuse `value` unless it is a finite number (a whole one if `integer`) within the bounds; None passes.

    >>> check_number("--learning-rate", float("nan"), above=0)
    Traceback (most recent call last):
    hf_encoderize.common.errors.EncoderizeError: --learning-rate must be a finite number above 0, got nan
    >>> check_number("--seed", 2**32, minimum=0, maximum=2**32 - 1, integer=True)
    Traceback (most recent call last):
    hf_encoderize.common.errors.EncoderizeError: --seed must be at least 0 and at most 4294967295, got 4294967296
    >>> check_number("--max-steps", 2**63, minimum=1, integer=True)  # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    hf_encoderize.common.errors.EncoderizeError: --max-steps must be at least 1 and at most 9223372036854775807, got
    9...8
    >>> check_number("--max-steps", -5, minimum=1, integer=True)
    Traceback (most recent call last):
    hf_encoderize.common.errors.EncoderizeError: --max-steps must be at least 1, got -5
    """
    if value is None:
        return  # the field's "use the default" marker
    flag = public_flag(flag)  # a flag built from a field name (`--steps`) is named as users type it (`--max-steps`)
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    whole = not isinstance(value, bool) and (isinstance(value, int) or math.isfinite(number) and number.is_integer())
    fine = math.isfinite(number) and (whole or not integer) and not isinstance(value, bool)
    exact = value if isinstance(value, int) else number  # 2**63 as a float rounds to INT64_MAX: compare the int
    if integer and maximum is None and exact > INT64_MAX:
        maximum = INT64_MAX  # every whole number has this bound; it is named only to the value that breaks it
    limits = {"minimum": minimum, "above": above, "maximum": maximum, "below": below}
    wanted = " and ".join(f"{word} {limits[name] if isinstance(limits[name], int) else f'{limits[name]:g}'}"
                          for name, word, _ in _BOUNDS if limits[name] is not None)
    if fine and all(test(exact, limits[name]) for name, _, test in _BOUNDS if limits[name] is not None):
        return
    kind = "a finite number" if not integer else "" if whole else "a whole number"  # an int's type is already right
    raise EncoderizeError(f"{flag} must be {' '.join(filter(None, (kind, wanted)))}, got {value}")


def parse_dims(text: str | None) -> list[int]:
    """'768,512,256' -> [768, 512, 256] (largest first); None -> []. A bad list is one line.

    >>> parse_dims("64, 256,128")
    [256, 128, 64]
    """
    if text is None:
        return []
    try:
        dims = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise EncoderizeError(f"--matryoshka-dims must be comma-separated whole numbers, e.g. 768,512,256 (got "
                              f"{text!r})") from None
    if not dims or min(dims) < 1 or len(set(dims)) != len(dims):
        raise EncoderizeError(f"--matryoshka-dims needs distinct sizes of at least 1, e.g. 768,512,256 (got {text!r})")
    return sorted(dims, reverse=True)


def check_data_name(name: str | None, data_files: str | None) -> None:
    """`--data-name`: how a card names a local corpus, so one short line of plain text, and only for --data-files (a
    Hub dataset is named by its id)."""
    if name is None:
        return
    if not data_files:
        raise EncoderizeError("--data-name names a local --data-files corpus on the card; a Hub dataset is named by "
                              "its id already: drop --data-name")
    if not name.strip() or len(name) > 100 or any(c in name for c in "`|\n\r<>"):
        raise EncoderizeError(f"--data-name must be one line of 1-100 characters without ` | < > (it goes into the "
                              f"card's table), not {name!r}")


def check_choice(flag: str, value, cls, name: str) -> None:
    """Refuse `value` unless it is one of the `Literal` values declared on `cls.name` (`options.choices_of`), in the
    one wording every enumerated option uses: `--pooling must be one of mean, lasttoken, weightedmean, not 'max'`."""
    allowed = choices_of(cls, name)
    if value not in allowed:
        raise EncoderizeError(f"{public_flag(flag)} must be one of {', '.join(map(str, allowed))}, not {value!r}")


def check_repo_id(repo_id: str | None, flag: str | None = None, *, namespaced: bool = True) -> None:
    """A one-line error for anything the Hub would refuse as a model repo id, for every command that takes one (push,
    push-space, --push-to-hub, card --model-id, --base-model-id): a card would otherwise print
    `from_pretrained("bad id!")`, which `push` refuses. None passes (not given). `flag`: the option, named first.
    `namespaced`: a repo pushed to is `user/name`; a base model may be a canonical id without one (`gpt2`).

    >>> check_repo_id("bad id!", "--model-id")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    hf_encoderize.common.errors.EncoderizeError: --model-id: invalid Hub repo id 'bad id!'; use user/name with ...
    """
    if repo_id is None:
        return
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    named = f"{flag}: " if flag else ""
    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise EncoderizeError(f"{named}invalid Hub repo id {repo_id!r}; use user/name with letters, digits, '-', '_', "
                              "'.'") from None
    if namespaced and repo_id.count("/") != 1:
        raise EncoderizeError(f"{named}invalid Hub repo id {repo_id!r}; use user/name (or org/name)")
