"""Does a saved encoder stay bidirectional in anyone's hands? Two answers, one cheap and one exact.

- `plain_attention(model_type)`, at save time: which backends plain transformers runs bidirectionally for this
  architecture, from a tiny fresh (unpatched) model of the same class with `is_causal=False`. Some classes drop the
  forward kwargs on the way to attention (StableLM's decoder layer calls `self_attn` without `**kwargs`), so the
  `is_causal=False` that transformers derives from the config never arrives, and sdpa (whenever it skips the mask: no
  padding) and flash fall back to the module's hard-coded `is_causal=True`. `saving` then makes the saved config
  select a backend that is bidirectional, and the card says so.
- `check_saved(folders)`, the round trip: a fresh Python process in which `hf_encoderize` cannot be imported loads
  each folder under sdpa, eager and flex_attention and checks bidirectionality, padding and packed documents, then
  fill-mask through the shipped remote code and `SentenceTransformer` (`roundtrip_check.py`). One process checks many
  folders, so the architecture matrix pays one interpreter start for all of them.

Flash attention in plain hands (transformers 5.23, read from `integrations/flash_attention.py` and
`utils/generic.py::merge_with_config_defaults`): the flash wrapper takes `is_causal` from the forward kwargs when given,
else from the module, and the base model's forward puts `config.is_causal` into those kwargs. So a class that
passes its kwargs down is bidirectional under flash exactly when it is under sdpa with the mask skipped, which is
what the `bidirectional` check measures (no mask); a class that drops them is causal under both. This is inferred
from the code, not run: flash kernels need a GPU (`tests/test_gpu.py` checks it on one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

CHECK_SCRIPT = Path(__file__).with_name("roundtrip_check.py")
BACKENDS = ("sdpa", "eager", "flex_attention")
_CHECKS = ("bidirectional", "padding", "packing")


def check_saved(folders: list[str | os.PathLike], backends=BACKENDS, timeout: int = 1800,
                workers: int | None = None) -> dict[str, dict]:
    """Run `roundtrip_check.py` on `folders` in fresh processes; folder (as given, str) -> its report.

    `workers` processes (default: up to 2, one per core) each check a share. A folder whose load kills its process (a
    native crash inside a model or a compiler) is reported as `{"crash": ...}` and the process is restarted on the
    folders after it, so one architecture cannot hide the others' results."""
    from concurrent.futures import ThreadPoolExecutor

    folders = [str(f) for f in folders]
    workers = max(1, min(workers or min(2, os.cpu_count() or 1), len(folders)))
    shares = [folders[i::workers] for i in range(workers)]
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(lambda share: _check_share(share, backends, timeout), shares))
    return {folder: report for part in parts for folder, report in part.items()}


def _check_share(folders: list[str], backends, timeout: int) -> dict[str, dict]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    reports, todo = {}, list(folders)
    while todo:
        with tempfile.TemporaryDirectory() as cwd:  # not the repository: nothing importable from the working folder
            done = subprocess.run([sys.executable, str(CHECK_SCRIPT), "--backends", ",".join(backends), "-"],
                                  input=json.dumps(todo), capture_output=True, text=True, timeout=timeout, env=env,
                                  cwd=cwd)
        started = stage = None
        for line in done.stdout.splitlines():
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "report" in record:
                reports[record["folder"]] = record["report"]
                started = None
            else:
                started, stage = record["folder"], record["started"]
        if done.returncode == 0:
            break
        if started is None:  # died before or between folders: nothing to blame, nothing to retry
            raise RuntimeError(f"the round-trip check failed (exit {done.returncode}): {done.stderr[-2000:]}")
        last_line = (done.stderr.strip().splitlines() or ["no message"])[-1][:160]
        reports[started] = {"crash": f"the process died under {stage} (exit {done.returncode}): {last_line}"}
        todo = todo[todo.index(started) + 1 :]
    return reports


def failures(report: dict) -> list[str]:
    """Every failed check in one folder's report, as "where: why" (empty: the round trip passed). A backend
    transformers does not offer for the class is not a failure, nor is one the saved config declares causal in plain
    transformers (it then selects another backend by default, and the card says so); the default load must work."""
    if "save" in report or "tokenizer" in report or "crash" in report:
        return [f"{where}: {why}" for where, why in report.items()]
    found = []
    declared = set(report.get("declared_causal", ()))
    for where, result in report.items():
        if where == "declared_causal" or where in declared:
            continue
        if not isinstance(result, dict):
            if result is not True:
                found.append(f"{where}: {result}")
            continue
        if result.get("loaded") == "unsupported" and where != "default":
            continue
        if result.get("loaded") is not True:
            found.append(f"{where}: load failed: {result.get('loaded')}")
            continue
        found += [f"{where} {check}: {result[check]}" for check in _CHECKS
                  if check in result and result[check] is not True and not str(result[check]).startswith("n/a")]
    return found


def summary(report: dict) -> str:
    """One table cell: "pass (sdpa, eager, flex_attention)" or the failures, shortened."""
    problems = failures(report)
    declared = report.get("declared_causal", [])
    if problems and report.get("default", {}).get("backend") in declared and all(p.startswith("default") for p in
                                                                                  problems):
        remote = (" (AutoModel and AutoModelForMaskedLM with trust_remote_code=True are)"
            if report.get("fill_mask") is True and report.get("remote_automodel") is True else "")
        return f"plain transformers cannot: causal under {', '.join(declared)}, declared{remote}"
    if problems:
        return "; ".join(p[:140] for p in problems[:3]).replace("|", "/") + (" ..." if len(problems) > 3 else "")
    declared = report.get("declared_causal", [])
    offered = [b for b, r in report.items()
               if isinstance(r, dict) and b != "default" and r.get("loaded") is True and b not in declared]
    default = report.get("default", {}).get("backend")
    limits = f"; {', '.join(declared)} causal in plain transformers, saved default {default}" if declared else ""
    no_packing = [b for b in offered if str(report[b].get("packing", "")).startswith("n/a")]
    limits += f"; packing n/a under {', '.join(no_packing)} (no packed mask accepted)" if no_packing else ""
    return f"pass ({', '.join(offered)}{limits})"


def word_tokenizer(size: int = 120):
    """A byte-level BPE tokenizer trained in memory on the words `w0 .. w{size-1}` (vocabulary under 256, so it fits
    the tiny models): the matrix's tiny encoders need one to be saved and reloaded. Byte-level BPE, because that is
    what transformers rebuilds for GPT-2/Qwen2-style model types whatever class the folder names, and the Hub is not
    needed for it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator([" ".join(f"w{i}" for i in range(size))] * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="</s>")


def save_tiny(model_type: str, out: str | os.PathLike, backend: str = "eager") -> Path:
    """Build `model_type` tiny (`architectures.tiny_config`), encoderize it with a word-level tokenizer and save it
    with `save_encoder`, exactly as `convert` would."""
    from transformers import AutoModelForCausalLM

    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.saving import save_encoder
    from hf_encoderize.model.tiny import tiny_config

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(model_type), attn_implementation=backend).float().eval()
    tokenizer = word_tokenizer()
    report = encoderize(model, tokenizer)
    return save_encoder(model, tokenizer, out, metadata=report.to_dict())


def round_trip(model_types: list[str], root: str | os.PathLike, backends=BACKENDS) -> dict[str, dict]:
    """Save every model type tiny under `root` and check them all in one fresh process: model type -> report (a
    save that fails gives `{"save": reason}`)."""
    folders, reports = {}, {}
    for model_type in model_types:
        try:
            folders[model_type] = str(save_tiny(model_type, Path(root) / model_type))
        except Exception as err:
            reports[model_type] = {"save": f"{type(err).__name__}: {' '.join(str(err).split())[:160]}"}
    checked = check_saved(list(folders.values()), backends) if folders else {}
    return {**reports, **{model_type: checked[folder] for model_type, folder in folders.items()}}
