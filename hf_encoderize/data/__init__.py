"""Text sources (Hub ids, local files and folders), document packing into fixed-length rows, and prefetching."""

import warnings


def __getattr__(name: str):
    # Deprecated (0.1 -> 0.2): `from hf_encoderize.data import DataConfig`, as the README showed, when `data` was a
    # module. It moved to `hf_encoderize.data.sources`; this alias goes in the next release.
    if name in ("DataConfig", "open_documents"):
        warnings.warn(f"hf_encoderize.data.{name} moved to hf_encoderize.data.sources; import it from there (this "
                      "alias goes in the next release)", DeprecationWarning, stacklevel=2)
        from hf_encoderize.data import sources

        return getattr(sources, name)
    raise AttributeError(f"module 'hf_encoderize.data' has no attribute {name!r}")
