"""Deprecated: `hf_encoderize.cpt` moved to `hf_encoderize.recipes.cpt` (0.1 -> 0.2).

This alias of the entry points the README showed goes in the next release.
"""

import warnings

from hf_encoderize.recipes.cpt import cpt  # noqa: F401

warnings.warn("hf_encoderize.cpt moved to hf_encoderize.recipes.cpt; import from there "
              "(this alias goes in the next release)", DeprecationWarning, stacklevel=2)
