"""Deprecated: `hf_encoderize.lora` moved to `hf_encoderize.training.lora` (0.1 -> 0.2).

This alias of the entry points the README showed goes in the next release.
"""

import warnings

from hf_encoderize.training.lora import AdapterConfig  # noqa: F401

warnings.warn("hf_encoderize.lora moved to hf_encoderize.training.lora; import from there "
              "(this alias goes in the next release)", DeprecationWarning, stacklevel=2)
