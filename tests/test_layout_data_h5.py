"""The data package is a stair, not a hallway (issue 70, point 5): each step before any weight loads is one module.

- No import circle among `hf_encoderize/data/*.py` (function-level imports included): import-linter's
  `acyclic_siblings` contract says so too, and its data layers contract orders them; this is the same rule inside a
  pytest run of the data tests, which does not run `lint-imports`.
- On the cpt path's data step before any weight loads (the config's default held-out count, `open_documents`, the
  token-budget and document-length checks), every data module is entered from at most one other data module, and
  never back from a module it calls: `budget` -> `sources` -> `corpus_files`, one way down.
"""

import ast
import sys
from pathlib import Path

from conftest import make_tokenizer, write_corpus

DATA = Path(__file__).resolve().parents[1] / "hf_encoderize" / "data"


def data_imports() -> dict[str, set[str]]:
    """Module name -> the data modules it imports (anywhere in it, `from hf_encoderize.data import x` included)."""
    modules = {path.stem for path in DATA.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in DATA.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                base = node.module.removeprefix("hf_encoderize.data").lstrip(".")
                if node.module.startswith("hf_encoderize.data") or node.level:
                    found |= {base.split(".")[0]} if base else {alias.name for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {alias.name.split(".")[2] for alias in node.names
                          if alias.name.startswith("hf_encoderize.data.")}
        graph[path.stem] = (found & modules) - {path.stem, "__init__"}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` (as the modules along it), or None."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_cycle_finder_finds_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle_among_data_modules():
    graph = data_imports()
    assert {"sources", "corpus_files", "budget", "packing"} <= set(graph)
    assert "corpus_files" in graph["sources"]  # the parser sees the imports it must
    assert cycle(graph) is None, f"import circle among hf_encoderize/data modules: {' -> '.join(cycle(graph))}"


def _data_calls(run) -> set[tuple[str, str]]:
    """The (caller, callee) module pairs of every call from one data module into another while `run()` runs."""
    prefix = str(DATA) + "/"
    pairs: set[tuple[str, str]] = set()

    def profile(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(prefix):
            return
        caller = frame.f_back
        while caller is not None and "hf_encoderize" not in caller.f_code.co_filename:
            caller = caller.f_back  # through itertools, datasets and builtins to the package frame that called
        if caller is not None and caller.f_code.co_filename.startswith(prefix):
            src, dst = Path(caller.f_code.co_filename).stem, Path(frame.f_code.co_filename).stem
            if src != dst:
                pairs.add((src, dst))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return pairs


def test_data_step_before_weights_walks_one_way_down(tmp_path):
    from hf_encoderize.data.budget import check_document_length, check_token_budget
    from hf_encoderize.data.sources import DataConfig, open_documents

    write_corpus(tmp_path / "docs.jsonl", 120, lambda i: 3 + i % 9)
    (tmp_path / "txt").mkdir()
    (tmp_path / "txt" / "a.txt").write_text("\n\n".join(f"w{i} w{i + 1} w{i + 2}" for i in range(90)))
    tokenizer, said = make_tokenizer(), []

    def step():
        for files in (tmp_path / "docs.jsonl", tmp_path / "txt"):
            data = DataConfig(data_files=str(files), seq_len=64)  # the default held-out count reads it through
            documents = open_documents(data, rows_per_step=4)
            check_token_budget(data, documents, tokenizer, 4, 1000, say=said.append)
            check_document_length(data, documents, tokenizer, say=said.append)

    pairs = _data_calls(step)
    assert len(said) == 4  # both warnings, both sources: every branch the runner takes before weights ran
    entered: dict[str, set[str]] = {}
    for src, dst in pairs:
        entered.setdefault(dst, set()).add(src)
    assert not {(dst, src) for src, dst in pairs} & pairs, f"a data module calls back into its caller: {pairs}"
    hallway = {dst: srcs for dst, srcs in entered.items() if len(srcs) > 1}
    assert not hallway, f"data modules entered from several data modules before any weight loads: {hallway}"
    assert pairs == {("budget", "sources"), ("sources", "corpus_files")}
