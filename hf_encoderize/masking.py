"""Deprecated: `hf_encoderize.masking` moved to `hf_encoderize.objectives.masking` (0.1 -> 0.2).

This alias of the entry points the README showed goes in the next release.
"""

import warnings

from hf_encoderize.objectives.masking import MaskingConfig  # noqa: F401

warnings.warn("hf_encoderize.masking moved to hf_encoderize.objectives.masking; import from there "
              "(this alias goes in the next release)", DeprecationWarning, stacklevel=2)
