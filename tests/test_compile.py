"""--compile: compiled decoder layers give the same loss and gradients as eager ones, and save under the same names."""

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import make_decoder
from torch._dynamo.utils import counters

from hf_encoderize.model.bidirectional import encoderize
from hf_encoderize.model.isolation import document_ids_from_lengths, packed_forward, packed_inputs
from hf_encoderize.training.compiling import compile_decoder_layers


def _loss_and_grads(model, ids, docs):
    model.zero_grad()
    # As the engine runs it: host-computed packed inputs, no KV cache.
    output = packed_forward(model.model, ids, docs, packed=packed_inputs(docs, "sdpa"), use_cache=False)
    hidden = output.last_hidden_state
    loss = model.lm_head(hidden).float().logsumexp(-1).mean()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow
def test_compiled_layers_train_like_eager_ones():
    ids = torch.randint(0, 100, (2, 16))
    docs = document_ids_from_lengths([[5, 11], [9, 4]], 16)
    eager = make_decoder("llama", "sdpa")
    encoderize(eager)
    compiled = make_decoder("llama", "sdpa")
    encoderize(compiled)
    assert compile_decoder_layers(compiled) == 2
    assert set(compiled.state_dict()) == set(eager.state_dict())  # no _orig_mod. prefix: checkpoints unchanged
    loss, grads = _loss_and_grads(eager, ids, docs)
    torch._dynamo.reset()
    counters.clear()
    compiled_loss, compiled_grads = _loss_and_grads(compiled, ids, docs)
    assert counters["stats"]["unique_graphs"] == 1  # both layers run one compiled graph
    torch.testing.assert_close(compiled_loss, loss, atol=1e-5, rtol=1e-5)
    assert grads.keys() == compiled_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.slow
def test_cpt_with_compile_trains_and_saves_plain_names(decoder_dir, tmp_path):
    from conftest import write_corpus
    from safetensors.torch import load_file

    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.recipes.cpt import cpt
    from hf_encoderize.training.train_config import TrainConfig

    corpus = write_corpus(tmp_path / "docs.jsonl", 120, lambda i: 5 + i % 17)
    summary = cpt(LoadConfig(str(decoder_dir), attn_implementation="sdpa"),
                  DataConfig(data_files=str(corpus), seq_len=32, eval_documents=8), MaskingConfig(),
                  TrainConfig(output_dir=str(tmp_path / "run"), steps=4, batch_size=4, save_every=2, eval_every=0,
                              progress=False, compile=True))
    assert all(torch.isfinite(torch.tensor(summary["losses"])))
    names = load_file(tmp_path / "run" / "encoder" / "model.safetensors").keys()
    assert names and not any("_orig_mod" in name for name in names)
    # The record says the layers ran compiled, and that dynamo neither broke the graph nor hit its recompile limit
    # (either would have run layers eagerly without a word): the check the GPU session reads under flex and flash.
    compiled = json.loads((tmp_path / "run" / "run_record.json").read_text())["compiled"]
    assert compiled["on"] and compiled["why"] == "--compile"
    assert compiled["unique_graphs"] >= 1 and compiled["graph_breaks"] == 0 and compiled["recompile_limit_hits"] == 0


class _FourBit(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = type("Config", (), {"quantization_config": config})()


@pytest.mark.parametrize(("device", "kwargs", "on", "says"), [
    ("cuda", {}, True, "on by default"),  # a CUDA or ROCm GPU (ROCm's torch device is "cuda" too)
    ("cpu", {}, False, "off on cpu"),
    ("mps", {}, False, "off on mps"),
    ("cuda", {"gradient_checkpointing": True}, False, "--gradient-checkpointing"),
    ("cuda", {"deepspeed": True}, False, "DeepSpeed"),
])
def test_compile_is_on_by_default_on_a_gpu_and_off_where_something_rules_it_out(device, kwargs, on, says):
    from hf_encoderize.training.compiling import compile_decision

    decision = compile_decision(None, torch.device(device), None, **kwargs)
    assert decision["on"] is on and says in decision["why"]


@pytest.mark.parametrize("config", [{"load_in_4bit": True}, type("BnB", (), {"load_in_4bit": True})()])
def test_a_four_bit_model_is_not_compiled_unless_asked(config):
    from hf_encoderize.training.compiling import compile_decision

    assert not compile_decision(None, torch.device("cuda"), _FourBit(config))["on"]
    assert compile_decision(True, torch.device("cuda"), _FourBit(config))["on"]  # --compile is taken as asked


def test_no_compile_and_compile_are_taken_as_asked_and_the_flags_parse():
    from hf_encoderize.cli import build_parser
    from hf_encoderize.training.compiling import compile_decision

    assert not compile_decision(False, torch.device("cuda"), None)["on"]
    parser = build_parser()
    for argv, expected in ((["--no-compile"], False), (["--compile"], True), ([], None)):
        args = parser.parse_args(["cpt", "some/model", "--data-files", "x.txt", "--output-dir", "o", *argv])
        assert args.compile is expected


def test_a_cpu_run_records_that_it_did_not_compile_and_why(decoder_dir, tmp_path):
    from conftest import write_corpus

    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.recipes.cpt import cpt
    from hf_encoderize.training.train_config import TrainConfig

    corpus = write_corpus(tmp_path / "docs.jsonl", 60, lambda i: 5 + i % 17)
    cpt(LoadConfig(str(decoder_dir), attn_implementation="sdpa"),
        DataConfig(data_files=str(corpus), seq_len=32, eval_documents=4), MaskingConfig(),
        TrainConfig(output_dir=str(tmp_path / "run"), steps=2, batch_size=2, eval_every=0, progress=False))
    record = json.loads((tmp_path / "run" / "run_record.json").read_text())
    assert record["compile"] is None and record["compiled"]["on"] is False
    assert record["compiled"]["why"].startswith("off on cpu")


class _VarlenLayer(torch.nn.Module):
    """A decoder layer that reads flash attention's packed inputs, as transformers' flash path does."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, hidden, cu_seq_lens_q=None, max_length_q=None, **kwargs):
        return self.proj(hidden) * max_length_q + cu_seq_lens_q[-1].float()


class _VarlenDecoder(torch.nn.Module):
    _no_split_modules = ["_VarlenLayer"]

    def __init__(self):
        super().__init__()
        self.config = type("Config", (), {"_attn_implementation": "flash_attention_2"})()
        self.layers = torch.nn.ModuleList([_VarlenLayer(), _VarlenLayer()])


def test_flash_varlen_inputs_do_not_recompile_every_batch():
    """Under flash attention every batch brings another document count (the length of `cu_seq_lens`) and another
    longest document (`max_length`). Static compilation recompiled for each and, past dynamo's limit of 8, fell back
    to eager; the layers must compile twice in all and compute what the eager layers compute."""
    compiled_graphs = []

    def counting_backend(graph, example_inputs):
        compiled_graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()
    model = _VarlenDecoder()
    hidden = torch.randn(1, 64, 8)
    expected = [model.layers[0](hidden, cu_seq_lens_q=torch.linspace(0, 64, documents + 1).int(),
                                max_length_q=3 * documents) for documents in range(2, 14)]  # eager, before compiling
    assert compile_decoder_layers(model, backend=counting_backend) == 2
    for documents, want in zip(range(2, 14), expected, strict=True):
        cu = torch.linspace(0, 64, documents + 1).int()
        torch.testing.assert_close(model.layers[0](hidden, cu_seq_lens_q=cu, max_length_q=3 * documents), want)
    assert len(compiled_graphs) == 2


def graphs_across_packed_layouts(backend: str) -> int:
    """How many graphs the compiled layers of a tiny encoderized Llama compile over five packed layouts."""
    graphs = []

    def counting_backend(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()
    model = make_decoder("llama", backend)
    encoderize(model)
    compile_decoder_layers(model, backend=counting_backend)
    layouts = ([[5, 11], [9, 7]], [[3, 13], [16]], [[8, 8], [4, 4, 8]], [[2, 14], [10, 6]], [[1, 15], [12, 4]])
    with torch.no_grad():
        for lengths in layouts:
            docs = document_ids_from_lengths(lengths, 16)
            packed_forward(model.model, torch.randint(0, 100, (2, 16)), docs, packed=packed_inputs(docs, backend),
                           use_cache=False)
    return len(graphs)


# Run in a fresh interpreter where `kernels` cannot be imported (transformers then decorates nothing).
_WITHOUT_KERNELS = """
import sys
sys.modules["kernels"] = None  # `import kernels` raises ImportError and find_spec finds nothing
sys.path[:0] = [sys.argv[2]]
import test_compile
import transformers.integrations.hub_kernels as hub
assert not hub.is_kernels_available()
print("graphs", test_compile.graphs_across_packed_layouts(sys.argv[1]))
"""


@pytest.mark.parametrize("backend", ["sdpa", pytest.param("flex_attention", marks=pytest.mark.slow)])
def test_compiled_layers_compile_once_across_packed_layouts(backend):
    """Every step packs its documents differently: sdpa's 4-D mask changes values, flex's `BlockMask` is rebuilt with
    a new mask function each step. Neither may make the compiled layers recompile: one graph for both layers and all
    five layouts, in this environment (where transformers >= 5.25 brings `kernels`, whose router on Llama's attention
    made flex's second layer recompile once: issue 72) and in one where `kernels` cannot be imported."""
    assert graphs_across_packed_layouts(backend) == 1
    done = subprocess.run([sys.executable, "-c", _WITHOUT_KERNELS, backend, str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["graphs", "1"], done.stdout[-2000:]


def test_an_idle_kernels_router_is_unwrapped_and_a_kernelized_one_kept():
    """The router `use_kernelized_func` puts on Llama's attention is replaced by the class's own forward when no hub
    kernel was swapped in (same outputs), and kept when one was."""
    pytest.importorskip("kernels")
    from hf_encoderize.training.compiling import route_no_idle_kernels

    model = make_decoder("llama", "sdpa")
    encoderize(model)
    attention = model.model.layers[0].self_attn
    if "_kernel_funcs" not in attention.__dict__:
        pytest.skip("this transformers does not route Llama's attention through kernels")
    ids = torch.randint(0, 100, (2, 16))
    with torch.no_grad():
        before = model.model(ids).last_hidden_state
        assert route_no_idle_kernels(model.model.layers[0]) == 1
        assert route_no_idle_kernels(model.model.layers[0]) == 0  # once only
        torch.testing.assert_close(model.model(ids).last_hidden_state, before)
    kernelized = model.model.layers[1].self_attn
    func = next(iter(kernelized._kernel_funcs.values()))
    func.forward = types.MethodType(type(func).forward, func)  # what `kernelize` does when it swaps a kernel in
    assert route_no_idle_kernels(model.model.layers[1]) == 0
    assert "forward" not in kernelized.__dict__


@pytest.mark.slow
def test_pretrain_switches_compiled_layers_to_bidirectional(tmp_path):
    """Compiling is the default on a GPU, pretrain included: its CLM -> MLM switch patches attention mid-run, and the
    compiled layers must follow it (dynamo guards what the patch changes and recompiles), not keep a causal graph.
    The compiled run gives the eager run's losses in both phases (a causal MLM phase would not), and passes the
    bidirectional probe at the switch and at the end."""
    from conftest import make_tokenizer

    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.recipes.pretrain import PretrainConfig, pretrain
    from hf_encoderize.training.train_config import TrainConfig

    make_decoder().config.to_json_file(tmp_path / "config.json")
    make_tokenizer().save_pretrained(tmp_path / "tokenizer")
    with (tmp_path / "docs.jsonl").open("w") as handle:
        for index in range(200):
            handle.write(json.dumps({"text": " ".join(f"w{(index * 7 + i) % 60}" for i in range(6 + index % 12))}))
            handle.write("\n")
    losses = {}
    for compiled in (False, True):
        spec = PretrainConfig(model_config=str(tmp_path / "config.json"), tokenizer=str(tmp_path / "tokenizer"),
                              schedule="clm:0.5,mlm:0.5")
        out = tmp_path / f"run-{compiled}"
        pretrain(spec, DataConfig(data_files=str(tmp_path / "docs.jsonl"), seq_len=32, eval_documents=8),
                 MaskingConfig(), TrainConfig(output_dir=str(out), steps=6, batch_size=4, lr=3e-3, save_every=100,
                                              eval_every=0, log_every=1, progress=False, compile=compiled))
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        losses[compiled] = [r["loss"] for r in records if r["kind"] == "train"]
        record = json.loads((out / "run_record.json").read_text())
        assert record["compiled"]["on"] is compiled
    assert len(losses[True]) == 6
    torch.testing.assert_close(torch.tensor(losses[True]), torch.tensor(losses[False]), rtol=2e-3, atol=2e-3)
