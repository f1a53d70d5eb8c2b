"""Deprecated: `hf_encoderize.loading` moved to `hf_encoderize.model.loading` (0.1 -> 0.2).

This alias of the entry points the README showed goes in the next release.
"""

import warnings

from hf_encoderize.model.loading import LoadConfig, load_decoder  # noqa: F401

warnings.warn("hf_encoderize.loading moved to hf_encoderize.model.loading; import from there "
              "(this alias goes in the next release)", DeprecationWarning, stacklevel=2)
