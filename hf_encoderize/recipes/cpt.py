"""`hf-encoderize cpt MODEL`: load, encoderize, then MLM continued pretraining; the encoder lands in OUT/encoder.

A recipe the runner (`training.runner`) walks through the training engine (`training.engine`): check everything that
can be checked before any weight is loaded, load and encoderize the model (and verify it behaves bidirectionally), add
LoRA if asked; the runner builds the run, trains it and saves the final model this recipe works out (LoRA merged, or
unwrapped) with the run record.

Output folder: `checkpoints/` (full training state, never pushed), `encoder/` (the model), `metrics.jsonl`,
`loss_curve.png` and `run_record.json` (the facts the model card reads).
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch

from hf_encoderize.common.config_file import options_of
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import identity_of
from hf_encoderize.common.locks import releasing_locks
from hf_encoderize.common.outputs import inputs_of
from hf_encoderize.common.precision import attention_dtype
from hf_encoderize.data.sources import DataConfig
from hf_encoderize.model.attention_backends import check_backend_available
from hf_encoderize.model.bidirectional import PACKED, EncoderizeReport
from hf_encoderize.model.loading import LoadConfig, load_tokenizer
from hf_encoderize.model.positions import check_positions, position_limit
from hf_encoderize.model.where_it_trains import (
    as_main_process_says,
    encoderize_where_it_trains,
    packing_after_probe,
)
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.objectives.phases import Phase, masked_phase
from hf_encoderize.objectives.targets import Target, build_target
from hf_encoderize.records.encoder_facts import EncoderFacts
from hf_encoderize.records.run_record import RunRecord
from hf_encoderize.records.run_settings import CptSettings, LoraFacts
from hf_encoderize.training.engine.accelerator import resolve_grad_accum
from hf_encoderize.training.lora import (
    AdapterConfig,
    apply_lora,
    check_qlora_available,
    check_targets_before_load,
    enable_checkpointing,
    merge_full_precision,
    merged_model,
    quantization_config,
)
from hf_encoderize.training.recipe import Built, FinalModel, Trained, run_settings
from hf_encoderize.training.resume_checks import check_branch_settings
from hf_encoderize.training.runner import run_recipe
from hf_encoderize.training.train_config import TrainConfig


def default_output_dir(load: LoadConfig) -> Path:
    """`runs/<model name>-mlm` when no --output-dir is given: the Hub id's or folder's last part whole (a version's dot
    is part of the name), a GGUF file's name without `.gguf`.

    >>> str(default_output_dir(LoadConfig("meta-llama/Llama-3.2-1B")))
    'runs/Llama-3.2-1B-mlm'
    >>> str(default_output_dir(LoadConfig("bartowski/SmolLM2-GGUF", gguf_file="SmolLM2-135M-Q4_K_M.gguf")))
    'runs/SmolLM2-135M-Q4_K_M-mlm'
    """
    name = Path(load.gguf_file).stem if load.gguf_file else Path(load.source).name
    return Path("runs") / f"{name}-mlm"


@releasing_locks  # a run that fails gives its output folder's lock back
def cpt(load: LoadConfig, data: DataConfig, masking: MaskingConfig, train: TrainConfig,
        adapter: AdapterConfig | None = None) -> dict:
    """Run MLM continued pretraining and save the encoder. Returns a summary: the run folder (`output_dir`), steps,
    per-step losses, the final held-out loss and masked accuracy, wall time."""
    adapter = adapter or AdapterConfig()
    if adapter.load_in_4bit and load.gguf_file:
        raise EncoderizeError("--load-in-4bit cannot quantise a GGUF file (transformers de-quantises GGUF weights on "
                              "load and refuses to re-quantise them); drop --load-in-4bit (--lora-r alone trains "
                              "LoRA on the de-quantised weights)")
    train = resolve_grad_accum(train, data.seq_len)
    target = build_target(masking)  # what masked positions learn (--masking-target), handed to the engine
    return run_recipe(Cpt(load=load, data=data, masking=masking, train=train, adapter=adapter, target=target,
                          output_dir=Path(train.output_dir) if train.output_dir else default_output_dir(load),
                          inputs=inputs_of(load, data, train),
                          phases=masked_phase(target, train.steps)))


@dataclass(frozen=True, kw_only=True)
class CptBuilt(Built):
    """`Built`, with what the final model needs: the patch report and the peft model (None without LoRA)."""

    report: EncoderizeReport
    peft_model: torch.nn.Module | None


@dataclass(frozen=True, kw_only=True)
class Cpt:
    """The cpt recipe (`training.recipe.Recipe`): one MLM phase on a model that arrives an encoder."""

    load: LoadConfig
    data: DataConfig
    masking: MaskingConfig
    train: TrainConfig
    adapter: AdapterConfig
    target: Target
    """What masked positions learn (`--masking-target`: mlm, mntp, ...)."""
    output_dir: Path
    inputs: list[Path]
    phases: list[Phase]
    """One masked phase over every step, learning `target`."""
    command: str = "cpt"
    switches_attention: bool = False  # encoderized (and probed) at load
    scores_starting_model: bool = True  # the base's held-out MLM loss, before the first step
    extendable: bool = True
    start_files: dict = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    summary_extra: dict = field(default_factory=dict)
    curve_title: str = "MLM continued pretraining"

    def check_launch(self, accelerator) -> None:
        """What this launch cannot do, refused before any work (a `--lora-targets` typo too, on the model's
        skeleton)."""
        check_launcher(accelerator, self.adapter)
        check_backend_available(self.load.attn_implementation)  # these two before the data checks speak
        if self.adapter.load_in_4bit:
            check_qlora_available()
        if not self.load.gguf_file and not self.load.trust_remote_code:
            check_targets_before_load(self.load.source, self.adapter)
        if self.train.exports and self.adapter.lora_r:
            raise EncoderizeError("--export-steps saves full encoders; with --lora-r the adapters would need merging "
                                  "at every export: export from a full fine-tune, or drop --export-steps")

    def load_tokenizer(self):
        """The source's tokenizer alone, after its config was classified and the row length checked against its
        position limit (both read only small files)."""
        check_seq_len(self.load, self.data.seq_len)
        return load_tokenizer(self.load)

    def build(self, accelerator) -> CptBuilt:
        """Load and encoderize the model where it trains, then make it trainable (gradient checkpointing, LoRA)."""
        load, masking, train, adapter = self.load, self.masking, self.train, self.adapter
        model, tokenizer, report = load_encoderized(load, self.data, train, adapter, accelerator)
        check_precision(accelerator, model, train, adapter)
        data = dataclasses.replace(self.data, pack=report.packing == PACKED)  # a hybrid whose layers leak: padded
        if train.gradient_checkpointing and not adapter.lora_r:
            enable_checkpointing(model)
        peft_model = apply_lora(model, adapter, tokenizer.mask_token_id,
                                gradient_checkpointing=train.gradient_checkpointing) if adapter.lora_r else None
        settings = cpt_settings(load, data, masking, train, adapter)
        # An export's block is the final encoder's, as far as the run knows it now (`EncoderFacts.of_run`).
        metadata = EncoderFacts.of_run(dataclasses.replace(RunRecord.of_settings(settings), command=self.command,
                                                           encoderize=report.facts()))
        # The encoder is saved in the loaded dtype; training may keep fp32 master weights meanwhile.
        return CptBuilt(model=model, tokenizer=tokenizer, data=data, settings=settings,
                        export_facts=lambda at: metadata, export_dtype=model.dtype, report=report,
                        peft_model=peft_model)

    def check_branch(self, checkpoint: Path, built: Built) -> None:
        check_branch_settings(checkpoint, built.settings.compared(), built.model)

    def final_model(self, run, built: CptBuilt, trained: Trained, weights: dict | None) -> FinalModel:
        """The encoder to save (main process): LoRA merged, in the dtype it was loaded in."""
        output_dir, loaded_dtype, peft_model, adapter = (run.output_dir, built.export_dtype, built.peft_model,
            self.adapter)
        final = run.accelerator.unwrap_model(run.model).model
        if peft_model is not None and adapter.load_in_4bit:
            # Merging into NF4 weights would re-quantise them and save a 4-bit checkpoint that needs bitsandbytes and
            # a GPU: reload the base in bf16 on CPU and merge the adapter there, for a plain model.
            peft_model.save_pretrained(output_dir / "adapter")
            final, _ = merge_full_precision(output_dir / "adapter", self.load)
            if not adapter.save_adapter:
                shutil.rmtree(output_dir / "adapter")
        elif peft_model is not None:
            if adapter.save_adapter:
                peft_model.save_pretrained(output_dir / "adapter")
            final = merged_model(peft_model)
        if weights is not None:
            weights = {name: t.to(loaded_dtype) if t.is_floating_point() else t for name, t in weights.items()}
        elif final.dtype != loaded_dtype and not adapter.load_in_4bit:
            final = final.to(loaded_dtype)
        saved_dtype = loaded_dtype if weights is not None else final.dtype
        return FinalModel(model=final, weights=weights, saved_dtype=str(saved_dtype).removeprefix("torch."),
                          encoderize=built.report.facts())


def check_launcher(accelerator, adapter: AdapterConfig) -> None:
    """Refuse, before any work, what this version cannot save: LoRA adapters merged out of FSDP or ZeRO-3 shards."""
    from accelerate.utils import DistributedType

    kind = accelerator.distributed_type
    sharded = kind == DistributedType.FSDP or (
        kind == DistributedType.DEEPSPEED and accelerator.state.deepspeed_plugin.zero_stage == 3)
    if adapter.lora_r and sharded:
        raise EncoderizeError("--lora-r under FSDP or DeepSpeed ZeRO-3 is not supported: the adapters are small, so "
                              "launch with DDP (`accelerate launch --multi_gpu -m hf_encoderize.cli cpt ...`) or "
                              "ZeRO-2 instead")


def check_precision(accelerator, model, train: TrainConfig, adapter: AdapterConfig) -> None:
    """Refuse fp16 autocast on fp16 weights that train as loaded: on a GPU the fp16 loss scaler unscales the gradients
    before clipping and refuses fp16 ones ("Attempting to unscale FP16 gradients"), which would end the run at its
    first step, after the load. fp32 master weights (the default) and LoRA (peft keeps adapters in fp32) are fine."""
    if getattr(accelerator, "scaler", None) is None or train.master_weights != "loaded" or adapter.lora_r:
        return
    if any(p.requires_grad and p.dtype == torch.float16 for p in model.parameters()):
        raise EncoderizeError("--mixed-precision fp16 with --master-weights loaded cannot train fp16 weights: the loss "
                              "scaler refuses fp16 gradients; drop --master-weights loaded (fp32 master weights) or "
                              "use --mixed-precision bf16")


def check_seq_len(load: LoadConfig, seq_len: int) -> None:
    """Refuse a row length above the model's position limit before any weight is downloaded."""
    from hf_encoderize.model.loading import load_config

    try:
        config = load_config(load)
    except EncoderizeError as err:
        if "already an encoder" not in str(err):
            raise
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(load.source, revision=load.revision)
    check_positions(seq_len, position_limit(config))


def load_encoderized(load: LoadConfig, data: DataConfig, train: TrainConfig, adapter: AdapterConfig,
                     accelerator=None):
    """Model (encoderized, with packed documents isolated, and verified by the probe), tokenizer, and the report.
    `report.packing` says how its rows are built ("packed", or "padded rows: <why>"), agreed by every process.

    With an `accelerator`, the probe runs where and in the precision the model will train (a flash-attention kernel
    cannot run on CPU tensors or in fp32); a model that FSDP/DeepSpeed will place goes back to the CPU afterwards."""
    from hf_encoderize.model.isolation import install_document_isolation
    from hf_encoderize.model.loading import is_native_encoder, load_encoder

    check_seq_len(load, data.seq_len)
    torch.manual_seed(train.seed)
    extra = {}
    if adapter.load_in_4bit:
        extra["quantization_config"] = quantization_config()  # available: checked at launch
    if not is_native_encoder(load):
        model, tokenizer, report, _ = encoderize_where_it_trains(
            load, extra, accelerator, adapter.load_in_4bit, pack=data.pack,
            compute_dtype=attention_dtype(accelerator, train.master_weights, frozen_base=bool(adapter.lora_r)))
    else:
        # MLM->MLM continued pretraining of an encoder (the paper's baseline, section 5): nothing to patch.
        model, tokenizer = load_encoder(load, model_kwargs=extra)
        report = EncoderizeReport(model.config.model_type, model.config._attn_implementation, False, 0, 0,
                                  {"mask_token": tokenizer.mask_token, "mask_token_path": "existing"})
        install_document_isolation()
        packing, probe = packing_after_probe(model, tokenizer, accelerator, adapter.load_in_4bit, data.pack,
                                             report, other_backends=False)
        report = dataclasses.replace(report, packing=packing, probe=probe)
    # Every process trains on the rows the main one chose, packed or padded.
    return model, tokenizer, dataclasses.replace(report, packing=as_main_process_says(accelerator, report.packing))


def cpt_settings(load: LoadConfig, data: DataConfig, masking: MaskingConfig, train: TrainConfig,
                 adapter: AdapterConfig) -> CptSettings:
    """The run's settings, as stored in the run record and run_settings.json, and sent to trackers."""
    return run_settings(
        CptSettings, data, masking, train, base_model=load.source, revision=load.revision, gguf_file=load.gguf_file,
        lora=LoraFacts(r=adapter.lora_r, alpha=adapter.lora_alpha, targets=adapter.lora_targets)
        if adapter.lora_r else None,
        load_in_4bit=adapter.load_in_4bit,
        identity=identity_of(load, data, masking, train, adapter),  # every field that counts for "same run?"
        options=options_of(load, data, masking, train, adapter),  # what was given, and derived, by option name
    )
