"""Logging: the CLI's progress lines through `logging`, quiet by default about everything else.

Design choices:
- One logger tree, `hf_encoderize.*` (`get_logger(__name__)`); its lines go to stderr as the text itself (no level or
  time stamp on a progress line; `warning:` in front of a warning), so stdout holds only a command's result (its
  table, its JSON summary) and can be piped.
- Three levels, set once by `setup_logging(verbosity)` from the CLI's global flags: `-q` (-1) warnings and errors only,
  the default (0) our progress lines, `-v` (1) our debug lines and the lines of the libraries we drive.
- A library's line is off unless `-v` (issue 67): its INFO and WARNING records (transformers, datasets, DeepSpeed,
  bitsandbytes, the kernels hub, sentence-transformers ...), the Python warnings raised outside this package (torch's
  pin_memory notice) and transformers' own progress bars (loading weights, writing shards). Each library is told with
  its own switch (`TRANSFORMERS_VERBOSITY` and `set_verbosity`, huggingface_hub's `disable_progress_bars`), not by
  matching its text. Shown, a line names its library (`[transformers.modeling_utils] warning: ...`), never our
  `warning:` prefix, so it does not read as ours. Its errors always show, named the same way.
- The Hub's download bars stay on at the default level: a first download of a model is a long phase, and its bar is
  the only progress it has. `-q` turns every library bar off.
- Only rank 0 says progress: under torchrun every other process logs warnings and errors only.
- The Python API configures nothing: a library that calls `cpt(...)` keeps its own logging set-up.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import is_main_process

ROOT = "hf_encoderize"
THIRD_PARTY = ("transformers", "datasets", "accelerate", "huggingface_hub", "onnxruntime", "onnx",
               "sentence_transformers", "urllib3", "filelock", "httpx", "peft", "bitsandbytes", "kernels", "torch",
               "mteb")
# The libraries' own switches, read when they are imported (a command imports them after `setup_logging`): their
# verbosity while a command runs, put back at teardown.
LIBRARY_ENV = ("TRANSFORMERS_VERBOSITY", "DATASETS_VERBOSITY")
_BEFORE: dict[str, int] = {}  # the levels `setup_logging` changed, put back by `teardown_logging`
_ENV_BEFORE: dict[str, str | None] = {}  # the environment variables it set, put back by `teardown_logging`
_BARS_OFF: list[bool] = []  # non-empty while the libraries' progress bars are off
_WARNING_FILTERS: list = []  # the `warnings.catch_warnings` that `teardown_logging` leaves (restoring the filters)


def get_logger(name: str) -> logging.Logger:
    """The logger of module `name` (`__name__`), under the package's tree."""
    return logging.getLogger(name if name.startswith(ROOT) else f"{ROOT}.{name}")


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if not record.name.startswith(ROOT):
            # A library's line names its library and its level after it: not one of our `warning:` or `error:`
            # lines (a command that fails says so in exactly one line of its own, and one that goes on was not
            # stopped by it).
            return text if record.levelno < logging.WARNING else f"[{record.name}] {record.levelname.lower()}: {text}"
        said = record.levelno == logging.WARNING and not text.startswith("warning:")  # a line may say it already
        return f"warning: {text}" if said else text


# Library error records about what this package handles itself, dropped unless -v: datasets logs a JSONL line it
# cannot parse before it raises, and our one error line names that file and line (data.sources).
EXPECTED = (("datasets.packaged_modules.json", "Failed to load JSON from file"),)
# Loggers that print through their own handlers and set their own level when imported (DeepSpeed's on stdout, at
# every command: "Setting accelerator to CPU"; transformers' and datasets'): filtered at the logger too.
_OWN_HANDLERS = ("DeepSpeed", "transformers.modeling_utils", "transformers.distributed.tensor_parallel",
                 "datasets.packaged_modules.json.json")


def _library_line_off(record: logging.LogRecord) -> bool:
    """False for a record the default level drops: a library's record below ERROR, or one of `EXPECTED`."""
    if record.name.startswith(ROOT):
        return True
    expected = any(record.name.startswith(name) and str(record.msg).startswith(start) for name, start in EXPECTED)
    return record.levelno >= logging.ERROR and not expected


def _main_process() -> bool:
    """launch.is_main_process (the one reader of RANK); a broken launch environment counts as the main process here,
    so the command itself refuses it in its one line."""
    try:
        return is_main_process()
    except EncoderizeError:
        return True


def setup_logging(verbosity: int = 0) -> None:
    """Route `hf_encoderize.*` to stderr at the level `verbosity` asks (-1 quiet, 0 progress, 1 debug), and the
    libraries' lines off unless verbose. Calling it again replaces the earlier set-up (tests call `main` often)."""
    ours = {-1: logging.WARNING, 0: logging.INFO}.get(verbosity, logging.DEBUG)
    if not _main_process():  # one process speaks for the run
        ours = max(ours, logging.WARNING)
    verbose = verbosity > 0
    theirs = logging.INFO if verbose else logging.ERROR
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Format("%(message)s"))
    handler.set_name(ROOT)
    root = logging.getLogger()
    teardown_logging()
    _BEFORE.update({name: logging.getLogger(name or None).level for name in ("", ROOT, *THIRD_PARTY)})
    root.addHandler(handler)
    if not verbose:
        handler.addFilter(_library_line_off)
        for name in _OWN_HANDLERS:
            logging.getLogger(name).addFilter(_library_line_off)
    root.setLevel(theirs)  # loggers that log through the root (ONNX Runtime's quantizer, the kernels hub) follow it
    logging.getLogger(ROOT).setLevel(ours)
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(theirs)
    _library_verbosity(theirs)
    _python_warnings(verbose)
    if verbosity <= 0:
        _progress_bars(show=False, downloads=verbosity == 0)


def teardown_logging() -> None:
    """Take the handler `setup_logging` added off again (a process that calls `main` many times, as tests do, would
    otherwise keep writing to a stream that is gone), and put back what it changed."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == ROOT]:
        root.removeHandler(old)
    for name in _OWN_HANDLERS:
        logging.getLogger(name).removeFilter(_library_line_off)
    if _WARNING_FILTERS:
        _WARNING_FILTERS.pop().__exit__(None, None, None)
    if _BARS_OFF:
        _progress_bars(show=True)
    for name, level in _BEFORE.items():
        logging.getLogger(name or None).setLevel(level)
    _BEFORE.clear()
    for name, value in _ENV_BEFORE.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _ENV_BEFORE.clear()


def _library_verbosity(level: int) -> None:
    """transformers and datasets keep their own level and handler: told with their own switch, now if imported and
    through their environment variable when a command imports them later."""
    name = logging.getLevelName(level).lower()
    for variable in LIBRARY_ENV:
        _ENV_BEFORE[variable] = os.environ.get(variable)
        os.environ[variable] = name
    for module in ("transformers", "datasets"):
        imported = sys.modules.get(f"{module}.utils.logging")
        if imported is not None:
            imported.set_verbosity(level)


def _python_warnings(verbose: bool) -> None:
    """The Python warnings of other packages: ignored unless -v, and then shown as one line naming their library.
    Ours (raised from the package's modules, and the shipped modeling file's `hf-encoderize: ...`) keep the filters
    in place before (Python's defaults hide a DeprecationWarning of an import we make)."""
    saved = warnings.catch_warnings()
    saved.__enter__()  # restores the filters and `showwarning` at teardown
    _WARNING_FILTERS.append(saved)
    if verbose:
        warnings.showwarning = _show_library_warning
        return
    warnings.filterwarnings("ignore", module=rf"(?!{ROOT}(\.|$))")  # ours fall through to the filters before
    # the saved encoder's own modeling file (loaded as `transformers_modules.*`) says which backend went unverified
    warnings.filterwarnings("default", message="hf-encoderize: ")


def _show_library_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """`[torch] warning: ... (UserWarning, torch/utils/data/dataloader.py:665)`: the library first, as its log lines."""
    parts = Path(filename).parts
    packages = [i for i, part in enumerate(parts) if part in ("site-packages", "dist-packages")]
    where = parts[packages[-1] + 1:] if packages and packages[-1] + 1 < len(parts) else parts[-1:]
    library = where[0].removesuffix(".py")
    print(f"[{library}] warning: {message} ({category.__name__}, {'/'.join(where)}:{lineno})",
          file=file or sys.stderr)


def _progress_bars(show: bool, downloads: bool = False) -> None:
    """The libraries' own progress bars (transformers' loading weights and writing shards): off unless -v, back on at
    teardown; `downloads` keeps the Hub's download bars (group `huggingface_hub`) on. huggingface_hub's switch is read
    by transformers at import; one already imported is told. An `HF_HUB_DISABLE_PROGRESS_BARS` the user set wins."""
    from huggingface_hub import constants
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    if constants.HF_HUB_DISABLE_PROGRESS_BARS is not None:
        return
    _BARS_OFF.clear() if show else _BARS_OFF.append(True)
    enable_progress_bars() if show else disable_progress_bars()
    if downloads and not show:
        enable_progress_bars("huggingface_hub")
    imported = sys.modules.get("transformers.utils.logging")
    if imported is not None:
        imported.enable_progress_bar() if show else imported.disable_progress_bar()


def progress_shown() -> bool:
    """Whether progress lines and bars show: the CLI's default and -v, on the process that speaks for the run (not
    under -q, and not through the Python API, which configures no logging). A library's own bar over a long phase
    (sentence-transformers' `encode(show_progress_bar=...)`) is asked for under this rule."""
    return get_logger(ROOT).isEnabledFor(logging.INFO)


class ProgressBar:
    """One bar with an ETA on stderr for a long phase that says little else (eval's grid of fine-tunings, a teacher
    labelling every text), shown where our progress lines are: not under -q, and on one process only. Progress lines
    said meanwhile go through `above(say)`, which lifts the bar, writes the line and draws the bar again below it."""

    def __init__(self, total: int, label: str, unit: str = "it"):
        self.bar = None
        if total > 0 and progress_shown():
            from tqdm.auto import tqdm

            # Off a terminal (CI logs, nohup) a redraw every 30 s keeps the log readable, as the training bar does.
            self.bar = tqdm(total=total, desc=label, unit=unit, dynamic_ncols=True, file=sys.stderr,
                            mininterval=0.5 if sys.stderr.isatty() else 30.0)

    @property
    def shown(self) -> bool:
        """Whether a bar is drawn (a library's own bar can be asked for under the same rule)."""
        return self.bar is not None

    def update(self, done: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(done)

    def above(self, say):
        """`say` (a progress callable taking one line), writing above the bar instead of through it."""
        if self.bar is None:
            return say

        def said(message: str) -> None:
            with self.bar.external_write_mode():
                say(message)
        return said

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
