"""`--compile`: torch.compile each decoder layer of the model being trained.

Design choices:
- Per layer, not the whole model: every decoder layer has the same code and, with packing, the same static shapes
  (fixed batch x seq len), so one compiled graph serves all of them and compiles in seconds; a whole-model graph
  would take minutes and break at the first data-dependent op. One graph needs `use_cache=False` in the forward (the
  engine passes it; tested: two layers, one graph): a KV cache makes each layer guard on its own `layer_idx` and
  compile a graph of its own.
- The masks (sdpa's block-diagonal bool mask, flex's `BlockMask`), the position ids and flash's `cu_seqlens` are built
  in the base model's forward and by the engine on the host, outside the compiled regions, and passed in as inputs.
- `dynamic=False`: shapes never change during a packed run; evaluation batches of another size recompile once.
  Except under flash attention, whose packed inputs reach every layer through its kwargs and change every batch:
  `cu_seq_lens_q/k` hold one entry per document and `max_length_q/k` is the longest document (a Python int).
  Static compilation would recompile for each new count or length and, past dynamo's recompile limit (8), run the
  layers eagerly without a word; `dynamic=None` lets dynamo make exactly those inputs dynamic at their first change
  (two compilations in all, `tests/test_compile.py`).
- Compiled before `accelerator.prepare`, in place (`nn.Module.compile`), so DDP/FSDP wrap the compiled layers (the
  order torchtitan uses for FSDP2: compile each block, then shard) and the state dict keeps its names (no `_orig_mod.`
  prefix in checkpoints or the saved encoder). Under DDP, compiling before or after `prepare` gave the same losses and
  the same weights on every rank as no compile (2 gloo processes, 3 steps); before is what the engine does.
- On by default on a CUDA or ROCm GPU (`compile_decision`), where it was measured faster: 1.27x at a 1B Llama shape
  and 1.39x at a 0.5B Qwen shape on an H200, at less memory (docs/gpu.md). Off on CPU and MPS (compiling there costs
  more than it saves on short runs), for a 4-bit model (bitsandbytes' NF4 matmuls), with gradient checkpointing and
  under DeepSpeed (neither measured with it). `--compile` / `--no-compile` decide instead; the run record says which
  way it went and why, with dynamo's counters (graphs compiled, graph breaks), so a recompile or a break that would
  run the layers eagerly is seen in the record, not guessed from the speed.
- A compiler failure on the first compiled use falls back instead of ending the run (`fall_back_to_eager`): the known
  one is flex attention's backward template asking more shared memory than a GPU has (Triton's `OutOfResources`).
  The layers first run in the held-out evaluation before step 1 (forward only), then in step 1 (forward and
  backward); a failure in either is caught. A failed evaluation is done again; a failed step is taken again with
  the same batch on eager layers (the gradients it had begun are dropped, and Accelerate's accumulation count is put
  back), one warning line says so, and the run record's `compiled` keeps
  `fallback` (the step and the error) with `on: false`. Only the first compiled step is covered: a failure after the
  layers have run compiled once is a real error and is raised. Every process of a run compiles the same graphs and
  fails the same way, so all fall back together.
- The hub-kernels routing stays out of compiled layers where it routes nothing. Since transformers 5.25 requires
  `kernels`, attention classes decorated with `use_kernelized_func` (Llama's, for its rotary embedding) wrap their
  forward in a router that writes a process-wide variable (`kernels`' `_ACTIVE_KERNEL_FUNCS`) while compiling; dynamo
  guards that variable, and a layer compiled under flex attention left it set (kernels 0.19.1, torch 2.13), so every
  other layer recompiled once. The router only matters once `kernelize` has swapped a hub kernel in, which the engine
  never asks for; until then each layer gets its class's own forward back (`route_no_idle_kernels`), and one graph
  serves every layer again (`tests/test_compile.py`, with and without `kernels`). A kernelized layer keeps its router.
"""

from __future__ import annotations

import types

import torch

from hf_encoderize.common.log import get_logger

log = get_logger(__name__)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers: modules whose class is one the model never splits (`_no_split_modules`), else the
    largest `ModuleList` of the model."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if layers:
        return layers
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def compile_decoder_layers(model: torch.nn.Module, **options) -> int:
    """`torch.compile` every decoder layer of `model` in place (static shapes but for flash's varlen inputs); returns
    how many were compiled.
    `options` go to `torch.compile` (the tests pass `backend="aot_eager"`)."""
    layers = decoder_layers(model)
    backend = getattr(getattr(model, "config", None), "_attn_implementation", None) or ""
    options.setdefault("dynamic", None if backend.startswith("flash_attention") else False)
    for layer in layers:
        route_no_idle_kernels(layer)
        layer.compile(**options)
    return len(layers)


def is_compiler_failure(error: BaseException) -> bool:
    """dynamo's or Inductor's failure (`BackendCompilerFailed`, `InductorError`), or Triton's at a kernel's first
    launch (`OutOfResources` on shared memory): what compiling can raise that eager layers would not."""
    from torch._dynamo.exc import TorchDynamoException

    return isinstance(error, TorchDynamoException) or type(error).__module__.split(".")[0] == "triton"


def fall_back_to_eager(decision: dict, model: torch.nn.Module, error: BaseException, step: int,
                       during: str = "training step") -> bool:
    """After `error` in the first compiled use of the layers (`during`: the held-out evaluation before step 1, or the
    first training step): when it is a compiler failure, run the decoder layers of `model` eagerly from now on, say so
    once and record it in `decision` (the run's `compiled`); returns whether it did (the caller then does the same
    work again). False for any other error, and once a training step has run compiled."""
    if not decision.get("on") or decision.get("ran") or not is_compiler_failure(error):
        return False
    for layer in decoder_layers(model):
        layer._compiled_call_impl = None  # what nn.Module.compile set: __call__ runs the layer eagerly again
    torch._dynamo.reset()
    said = describe_failure(error)
    decision.update(on=False, fallback={"step": step, "during": during, "now": "eager decoder layers", "error": said})
    log.warning(f"compiling the decoder layers failed in the {during} at step {step} ({said[:200]}); "
                "training on with eager layers (recorded in run_record.json; --no-compile skips the attempt)")
    return True


def describe_failure(error: BaseException) -> str:
    """One line naming a compiler failure by its innermost cause: dynamo's wrapper says only which backend raised.

    >>> describe_failure(RuntimeError("out of resource: shared memory\\nmore"))
    'RuntimeError: out of resource: shared memory'
    """
    names, inner = [type(error).__name__], error
    while (cause := getattr(inner, "inner_exception", None) or inner.__cause__) is not None and len(names) < 5:
        names.append(type(cause).__name__)
        inner = cause
    first_line = (str(inner).strip().splitlines() or [""])[0][:300]
    return f"{' <- '.join(names)}: {first_line}"


def route_no_idle_kernels(layer: torch.nn.Module) -> int:
    """Give every submodule of `layer` whose forward is `kernels`' `use_kernelized_func` router, with no hub kernel
    swapped in, its class's own forward back (see the module docstring); returns how many were unwrapped.
    A module is left as it is when any of its kernel functions was kernelized (`kernelize` binds a `forward` on it)."""
    unwrapped = 0
    for module in layer.modules():
        router = type(module).forward
        funcs = module.__dict__.get("_kernel_funcs")
        if not funcs or not _is_kernels_router(router) or "forward" in module.__dict__:
            continue
        if any("forward" in func.__dict__ for func in funcs.values()):
            continue  # a hub kernel is in use: the router is what calls it
        module.forward = types.MethodType(router.__wrapped__, module)
        unwrapped += 1
    return unwrapped


def _is_kernels_router(forward) -> bool:
    code = getattr(forward, "__code__", None)
    return (code is not None and code.co_name == "new_forward" and hasattr(forward, "__wrapped__")
            and code.co_filename.replace("\\", "/").endswith("kernels/_internals/layer/layer.py"))


def compile_decision(requested: bool | None, device: torch.device, model, *, deepspeed: bool = False,
                     gradient_checkpointing: bool = False) -> dict:
    """Whether a run compiles its decoder layers, and why: `requested` is `--compile` (True), `--no-compile` (False),
    or neither (None: on a CUDA/ROCm GPU unless something rules it out, see the module docstring).

    >>> compile_decision(None, torch.device("cpu"), None)["on"]
    False
    >>> compile_decision(True, torch.device("cpu"), None)
    {'requested': True, 'on': True, 'why': '--compile'}
    """
    if requested is not None:
        return {"requested": requested, "on": requested, "why": "--compile" if requested else "--no-compile"}
    rules_out = (
        (device.type != "cuda", f"off on {device.type}: compiling costs more than it saves there (--compile turns it "
                                "on)"),
        (_four_bit(model), "off for a 4-bit model: bitsandbytes' NF4 matmuls are not compiled (--compile to try)"),
        (gradient_checkpointing, "off with --gradient-checkpointing: not measured together (--compile to try)"),
        (deepspeed, "off under DeepSpeed: not measured there (--compile to try)"),
    )
    why = next((reason for ruled, reason in rules_out if ruled), None)
    if why:
        return {"requested": None, "on": False, "why": why}
    return {"requested": None, "on": True, "why": "on by default on a CUDA/ROCm GPU (measured faster, docs/gpu.md); "
                                                  "--no-compile turns it off"}


def _four_bit(model) -> bool:
    if model is None:
        return False
    quantization = getattr(getattr(model, "config", None), "quantization_config", None)
    if isinstance(quantization, dict):
        return bool(quantization.get("load_in_4bit"))
    return bool(getattr(model, "is_loaded_in_4bit", False) or getattr(quantization, "load_in_4bit", False))


def dynamo_counters() -> dict:
    """dynamo's process-wide counters that say whether compiled layers ran as compiled: graphs compiled, frames
    captured, graph breaks (by reason) and recompile-limit hits. Cumulative: `counters_since` takes the difference."""
    from torch._dynamo.utils import counters

    # torch 2.11-2.13 file a hit under "unimplemented" ("Dynamo recompile limit exceeded ..."), older ones under
    # "frames": both are read, or the hits would always count 0 (as they did; found rehearsing the GPU session).
    hits = [count for group in ("frames", "unimplemented") for reason, count in counters[group].items()
            if "limit" in reason.lower()]
    return {"unique_graphs": counters["stats"].get("unique_graphs", 0),
            "frames": counters["frames"].get("total", 0),
            "graph_breaks": dict(counters["graph_break"]),
            "recompile_limit_hits": sum(hits)}


def counters_since(before: dict) -> dict:
    """What dynamo did since `before` (`dynamo_counters()` then): the figures a compiled run records."""
    now = dynamo_counters()
    breaks = {reason: count - before["graph_breaks"].get(reason, 0) for reason, count in now["graph_breaks"].items()
              if count - before["graph_breaks"].get(reason, 0) > 0}
    return {"unique_graphs": now["unique_graphs"] - before["unique_graphs"], "frames": now["frames"] - before["frames"],
            "graph_breaks": sum(breaks.values()), "graph_break_reasons": dict(list(breaks.items())[:5]),
            "recompile_limit_hits": now["recompile_limit_hits"] - before["recompile_limit_hits"]}


def compile_report(decision: dict) -> dict:
    """The run record's `compiled`: the decision, and for compiled layers what dynamo did during the run. Graph breaks
    or a hit recompile limit mean layers ran (partly) eagerly: said once, as a warning, and kept in the record."""
    report = {key: value for key, value in decision.items() if key not in ("counters_before", "ran")}
    if not decision["on"]:
        return report
    report.update(counters_since(decision["counters_before"]))
    if report["graph_breaks"] or report["recompile_limit_hits"]:
        log.warning(f"compiled layers: {report['graph_breaks']} graph break(s), {report['recompile_limit_hits']} "
                    f"recompile-limit hit(s); parts ran eagerly ({report['graph_break_reasons']}); --no-compile "
                    "turns compiling off")
    return report
