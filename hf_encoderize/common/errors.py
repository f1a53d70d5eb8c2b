"""One exception type for every user-facing failure.

The CLI turns an `EncoderizeError` into a single `error: ...` line and exit code 2, with no traceback. Messages are
one line and say what to do next.
"""


class EncoderizeError(Exception):
    """A bad input or an unsupported model. The message is one line that tells the user what to do."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))
