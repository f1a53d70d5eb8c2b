"""One check for every numeric option, used by the config dataclasses' `__post_init__`.

Why one helper: `float("nan")` and `float("inf")` parse as floats, and NaN compares false with everything, so a
check like `if lr <= 0: refuse` lets NaN through. `check_number` first requires a finite number, then the bounds,
and always says the same thing: `--lr must be a finite number above 0, got nan`.
"""

from __future__ import annotations

import math
import operator

from hf_encoderize.common.errors import EncoderizeError

_BOUNDS = (("minimum", "at least", operator.ge), ("above", "above", operator.gt),
           ("maximum", "at most", operator.le), ("below", "below", operator.lt))


def check_number(flag: str, value, *, minimum: float | None = None, above: float | None = None,
                 maximum: float | None = None, below: float | None = None, integer: bool = False) -> None:
    """Refuse `value` unless it is a finite number (a whole one if `integer`) within the bounds; None passes.

    >>> check_number("--lr", float("nan"), above=0)
    Traceback (most recent call last):
    hf_encoderize.common.errors.EncoderizeError: --lr must be a finite number above 0, got nan
    """
    if value is None:
        return  # the field's "use the default" marker
    limits = {"minimum": minimum, "above": above, "maximum": maximum, "below": below}
    wanted = " and ".join(f"{word} {limits[name]:g}" for name, word, _ in _BOUNDS if limits[name] is not None)
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    whole = not isinstance(value, bool) and (isinstance(value, int) or math.isfinite(number) and number.is_integer())
    fine = math.isfinite(number) and (whole or not integer) and not isinstance(value, bool)
    if fine and all(test(number, limits[name]) for name, _, test in _BOUNDS if limits[name] is not None):
        return
    kind = "a finite number" if not integer else "" if whole else "a whole number"  # an int's type is already right
    raise EncoderizeError(f"{flag} must be {' '.join(filter(None, (kind, wanted)))}, got {value}")
