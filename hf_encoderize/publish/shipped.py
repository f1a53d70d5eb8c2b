"""Where the folders that ship beside the code live: `space/` (the Space as it deploys) and `model_cards/` (the card
templates).

Design choices:
- In the repository they sit at the top, where a user looks for a Space folder to deploy; a wheel maps them into the
  package as `hf_encoderize/space/` and `hf_encoderize/model_cards/` (pyproject.toml, `[tool.setuptools.package-dir]`),
  so `space` and `card` work from an installed wheel as from a checkout.
- The installed place is looked at first: beside an installed package, the top of site-packages may hold some other
  project's `space/`.
"""

from __future__ import annotations

from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError

PACKAGE_DIR = Path(__file__).resolve().parents[1]
SHIPPED = ("space", "model_cards")


def shipped_dir(name: str) -> Path:
    """The folder `name` ("space" or "model_cards"): inside the installed package, else at the top of the checkout.

    >>> (shipped_dir("space") / "app.py").is_file(), (shipped_dir("model_cards") / "encoder.md.j2").is_file()
    (True, True)
    """
    if name not in SHIPPED:
        raise ValueError(f"{name!r} is not one of the shipped folders {SHIPPED}")
    for folder in (PACKAGE_DIR / name, PACKAGE_DIR.parent / name):
        if folder.is_dir():
            return folder
    raise EncoderizeError(f"the {name}/ folder that ships with hf-encoderize is missing from {PACKAGE_DIR}; reinstall "
                          "it (pip install --force-reinstall hf-encoderize)")
