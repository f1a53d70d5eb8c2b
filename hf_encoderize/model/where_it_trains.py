"""Encoderize a model where it will train, and trust only what the probe saw there.

`convert` and `cpt` both call `encoderize_where_it_trains`: load the decoder (backend candidates from
`loading.load_decoder_trying`), patch it, run the bidirectionality probe on the training device under the run's
autocast, and fall back to the next attention backend when one fails there. A model that fails only packed-document
isolation where no backend can help trains on padded rows (`packing_after_probe`); under several processes the main
process decides how rows are built, so every rank builds them the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.precision import autocast_dtype
from hf_encoderize.model.loading import LoadConfig


def encoderize_where_it_trains(load: LoadConfig, model_kwargs: dict, accelerator, quantized: bool,
                               pack: bool | None = None, compute_dtype: torch.dtype | None = None):
    """Load the decoder, encoderize it and probe it where it trains. Returns `(model, tokenizer, report, tried)`:
    `report.attn_implementation` is the backend that runs, `tried` (also `report.attn_candidates`) the candidates
    considered with why each was skipped (`loading.load_decoder_trying`), `report.packing` how rows are built.

    With `--attn-implementation auto`, a backend whose model fails the probe there (a kernel that crashes on this
    device or in this precision, or that lets packed documents leak) gives way to the next candidate, reloaded from
    the source: older model classes cannot switch backend in place. eager, the last, and an explicit backend raise.
    A model that fails only packed-document isolation where no backend can help (a hybrid, or the last candidate)
    trains on padded rows instead (`packing_after_probe`); `pack`: the user's --pack/--no-pack, None when not given.
    `compute_dtype`: the dtype attention will train in (`precision.attention_dtype`); None: the autocast dtype, else the
    weights'."""
    from hf_encoderize.model.bidirectional import NotBidirectionalError, encoderize
    from hf_encoderize.model.isolation import install_document_isolation
    from hf_encoderize.model.loading import load_decoder_trying

    failed = {}
    if compute_dtype is None:  # the autocast dtype, else the weights'
        compute_dtype = autocast_dtype(accelerator)
    while True:
        model, tokenizer, tried = load_decoder_trying(load, model_kwargs=model_kwargs, exclude=failed,
                                                      compute_dtype=compute_dtype)
        report = dataclasses.replace(encoderize(model, tokenizer), attn_candidates=tried)
        install_document_isolation()
        last = load.attn_implementation != "auto" or report.attn_implementation == "eager"
        try:
            packing, probe = packing_after_probe(model, tokenizer, accelerator, quantized, pack, report,
                                                 other_backends=not last)
            return model, tokenizer, dataclasses.replace(report, packing=packing, probe=probe), tried
        except NotBidirectionalError as err:
            if last:
                raise
            failed[report.attn_implementation] = f"failed the probe: {err}"
        _warn(accelerator, f"attention backend {report.attn_implementation} {failed[report.attn_implementation]}; "
                           "trying the next one")
        del model  # its weights (on the training device) go before the next candidate's load
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def packing_after_probe(model, tokenizer, accelerator, quantized: bool, pack: bool | None, report,
                        other_backends: bool) -> tuple[str, str]:
    """Probe the model where it trains and return how its rows must be built: "packed", or "padded rows: <why>" (one
    document per row: `--no-pack`, or packed documents leak while every other check passes), with the probe's
    verdict (`EncoderizeReport.probe`; empty when it did not run here). Raises `NotBidirectionalError` for any other
    failure, and for a leak another backend may not have when rows are to be packed (`other_backends`; never for a
    hybrid, whose state-space layers leak under every backend); refuses an explicit `--pack` on a model that leaks."""
    from hf_encoderize.model.bidirectional import PACKED, NotBidirectionalError
    from hf_encoderize.model.kinds import HYBRID, classify_config

    chosen = PACKED if pack is not False else "padded rows: --no-pack"
    try:
        result = probe_where_it_trains(model, tokenizer, accelerator, quantized)
        return chosen, result.summary() if result is not None else ""
    except NotBidirectionalError as err:
        result = err.result
        hybrid = classify_config(model.config) == HYBRID
        another_may_isolate = other_backends and not hybrid and pack is not False
        if result is None or not result.passed_without_packing or another_may_isolate:
            raise
        probe = result.summary()
    if pack is False:
        return chosen, probe
    why = ("its state-space/linear-attention layers carry state from one packed document into the next" if hybrid
           else f"packed documents leak under {report.attn_implementation} attention")
    name = model.config.model_type
    if pack is True:
        raise EncoderizeError(f"--pack: {name} cannot train on packed rows: {why} (the probe's "
                              "packed_documents_isolated check fails); drop --pack or pass --no-pack to train on "
                              "padded rows, one document per row")
    _warn(accelerator, f"{name} trains on padded rows (one document per row), not packed ones: {why} (the probe's "
                       "packed_documents_isolated check fails; every other check passes)")
    return f"padded rows: {why}", probe


def as_main_process_says(accelerator, packing: str) -> str:
    """Every process builds its rows the same way: the main process decides (a rank holding only meta tensors under
    FSDP's RAM-efficient loading could not run the probe)."""
    if accelerator is None or accelerator.num_processes == 1:
        return packing
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([packing])[0]


def _warn(accelerator, message: str) -> None:
    if accelerator is None or accelerator.is_main_process:
        print(f"warning: {message}", file=sys.stderr, flush=True)


def probe_where_it_trains(model, tokenizer, accelerator, quantized: bool):
    """Run the bidirectionality probe on the training device under autocast (a flash-attention kernel cannot run on
    CPU tensors or in fp32) and return its `ProbeResult` (None when this rank has nothing to run). A model FSDP/
    DeepSpeed will place goes back to the CPU afterwards; ZeRO-3 partitions are gathered for the probe; a rank that
    holds only meta tensors (FSDP's RAM-efficient loading: rank 0 loads the weights, the others receive them at
    `prepare`) has nothing to run and leaves the check to rank 0."""
    from hf_encoderize.model.bidirectional import verify_bidirectional

    if accelerator is None:
        return verify_bidirectional(model, pad_token_id=tokenizer.pad_token_id)
    from accelerate.utils import DistributedType
    from transformers.integrations import is_deepspeed_zero3_enabled

    if any(p.device.type == "meta" for p in model.parameters()):
        return None
    gather, zero3 = contextlib.nullcontext(), is_deepspeed_zero3_enabled()
    if zero3:  # weights built under zero.Init: the probe would see empty partitions
        import deepspeed

        gather = deepspeed.zero.GatheredParameters(list(model.parameters()))
    movable = not quantized and not zero3  # bitsandbytes and ZeRO-3 place their own weights
    if movable:
        model.to(accelerator.device)
    try:
        with gather, accelerator.autocast():
            return verify_bidirectional(model, pad_token_id=tokenizer.pad_token_id)
    finally:  # also after a failure: a model that trains on padded rows is placed like any other
        if movable and accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED):
            model.to("cpu")
