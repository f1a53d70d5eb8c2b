"""Logging: the CLI's progress lines through `logging`, quiet by default about everything else.

Design choices:
- One logger tree, `hf_encoderize.*` (`get_logger(__name__)`); its lines go to stderr as the text itself (no level or
  time stamp on a progress line; `warning:` in front of a warning), so stdout holds only a command's result (its
  table, its JSON summary) and can be piped.
- Three levels, set once by `setup_logging(verbosity)` from the CLI's global flags: `-q` (-1) warnings and errors only,
  the default (0) our progress lines, `-v` (1) our debug lines and the INFO chatter of the libraries we drive
  (transformers, datasets, accelerate, huggingface_hub, ONNX Runtime's quantizer), which is off otherwise.
- Only rank 0 says progress: under torchrun every other process logs warnings and errors only.
- The Python API configures nothing: a library that calls `cpt(...)` keeps its own logging set-up.
"""

from __future__ import annotations

import logging
import sys
import warnings

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import is_main_process

ROOT = "hf_encoderize"
THIRD_PARTY = ("transformers", "datasets", "accelerate", "huggingface_hub", "onnxruntime", "onnx",
               "sentence_transformers", "urllib3", "filelock", "httpx", "peft")
_BEFORE: dict[str, int] = {}  # the levels `setup_logging` changed, put back by `teardown_logging`
_BARS_OFF: list[bool] = []  # non-empty while -q has the libraries' progress bars off


def get_logger(name: str) -> logging.Logger:
    """The logger of module `name` (`__name__`), under the package's tree."""
    return logging.getLogger(name if name.startswith(ROOT) else f"{ROOT}.{name}")


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno > logging.WARNING and not record.name.startswith(ROOT):
            # A library's error record is not one of our `error:` lines: a command that fails says so in exactly one
            # line of its own, and one that goes on was not stopped by it.
            return f"[{record.name}] {record.levelname.lower()}: {text}"
        if record.levelno == logging.WARNING and not record.name.startswith(ROOT):
            return f"warning: [{record.name}] {text}"
        said = record.levelno == logging.WARNING and not text.startswith("warning:")  # a line may say it already
        return f"warning: {text}" if said else text


# Library warnings about what this package chose on purpose, dropped unless -v: sentence-transformers 6 warns at every
# load that a model has a default prompt, and every contrastive model has one (its lead tokens, `lead_token`);
# transformers says how it initialises the rows `model.tokens` adds (mean_resizing, chosen there); DeepSpeed (the dev
# extra brings it in) says, on stdout, that a machine without a GPU runs on the CPU, in every command; datasets logs
# a JSONL line it cannot parse before it raises, and our one error line names that file and line (data.sources).
EXPECTED = (("sentence_transformers", "Default prompt name is set to "),
            ("transformers.modeling_utils", "The new embeddings will be initialized"),
            ("transformers.modeling_utils", "The new lm_head weights will be initialized"),
            ("DeepSpeed", "Setting accelerator to CPU"),
            ("datasets.packaged_modules.json", "Failed to load JSON from file"),
            # transformers' tensor-parallel check says which norms it leaves unsharded at every load of a model that
            # declares a TP plan, on one process that shards nothing
            ("transformers.distributed.tensor_parallel", "The following layers were not sharded"))
# Loggers that print through their own handlers (transformers', DeepSpeed's on stdout, datasets' on stderr): filtered
# at the logger.
_OWN_HANDLERS = ("transformers.modeling_utils", "DeepSpeed", "datasets.packaged_modules.json.json",
                 "transformers.distributed.tensor_parallel")
# Python warnings of the same kind, off unless -v: torch's DataLoader warns at every Trainer run on a CPU that the
# Trainer's own pin_memory default does nothing there.
EXPECTED_WARNINGS = (r"'pin_memory' argument is set as true but no accelerator is found",)
_WARNING_FILTERS: list = []  # the `warnings.catch_warnings` that `teardown_logging` leaves (restoring the filters)


def _not_expected(record: logging.LogRecord) -> bool:
    return not any(record.name.startswith(name) and str(record.msg).startswith(start) for name, start in EXPECTED)


def _main_process() -> bool:
    """launch.is_main_process (the one reader of RANK); a broken launch environment counts as the main process here,
    so the command itself refuses it in its one line."""
    try:
        return is_main_process()
    except EncoderizeError:
        return True


def setup_logging(verbosity: int = 0) -> None:
    """Route `hf_encoderize.*` to stderr at the level `verbosity` asks (-1 quiet, 0 progress, 1 debug), and the
    libraries' INFO lines off unless verbose. Calling it again replaces the earlier set-up (tests call `main` often)."""
    ours = {-1: logging.WARNING, 0: logging.INFO}.get(verbosity, logging.DEBUG)
    if not _main_process():  # one process speaks for the run
        ours = max(ours, logging.WARNING)
    theirs = logging.INFO if verbosity > 0 else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Format("%(message)s"))
    handler.set_name(ROOT)
    if verbosity <= 0:
        handler.addFilter(_not_expected)
    root = logging.getLogger()
    teardown_logging()
    _BEFORE.update({name: logging.getLogger(name or None).level for name in ("", ROOT, *THIRD_PARTY)})
    root.addHandler(handler)
    if verbosity <= 0:
        for name in _OWN_HANDLERS:
            logging.getLogger(name).addFilter(_not_expected)
        saved = warnings.catch_warnings()
        saved.__enter__()
        _WARNING_FILTERS.append(saved)
        for message in EXPECTED_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
    root.setLevel(theirs)  # loggers that log through the root (ONNX Runtime's quantizer does) stay quiet
    logging.getLogger(ROOT).setLevel(ours)
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(theirs)
    _library_verbosity(verbose=verbosity > 0)
    if verbosity < 0:
        _progress_bars(show=False)


def teardown_logging() -> None:
    """Take the handler `setup_logging` added off again (a process that calls `main` many times, as tests do, would
    otherwise keep writing to a stream that is gone)."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == ROOT]:
        root.removeHandler(old)
    for name in _OWN_HANDLERS:
        logging.getLogger(name).removeFilter(_not_expected)
    if _WARNING_FILTERS:
        _WARNING_FILTERS.pop().__exit__(None, None, None)
    if _BARS_OFF:
        _progress_bars(show=True)
    for name, level in _BEFORE.items():
        logging.getLogger(name or None).setLevel(level)
    _BEFORE.clear()


def _library_verbosity(verbose: bool) -> None:
    """transformers and datasets keep their own level and handler; set them the same way."""
    level = logging.INFO if verbose else logging.WARNING
    for module in ("transformers", "datasets"):
        imported = sys.modules.get(f"{module}.utils.logging")
        if imported is not None:
            imported.set_verbosity(level)


def _progress_bars(show: bool) -> None:
    """The libraries' own progress bars (loading weights, writing shards, downloads): off under -q, which keeps only
    warnings and errors, and back on at teardown. huggingface_hub's switch is read by transformers at import; one
    already imported is told."""
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    _BARS_OFF.clear() if show else _BARS_OFF.append(True)
    enable_progress_bars() if show else disable_progress_bars()
    imported = sys.modules.get("transformers.utils.logging")
    if imported is not None:
        imported.enable_progress_bar() if show else imported.disable_progress_bar()
