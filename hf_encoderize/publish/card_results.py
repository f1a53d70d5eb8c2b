"""The card's "Results" section: the fine-tuning suite's table next to the base model's, the per-family means, the
sentence that states the protocol, and the MTEB zero-shot table.

Rows of a synthetic or smoke set are marked as such here and kept out of the metadata (`card_index`).
"""

from __future__ import annotations

from hf_encoderize.publish.card_facts import CardFacts
from hf_encoderize.publish.card_index import TASK_NAMES, is_synthetic
from hf_encoderize.publish.card_rows import score, signed
from hf_encoderize.records.eval_summary import EvalSummary


def results_rows(facts: CardFacts) -> list[dict]:
    """The results table: each encoder score next to the base model's score on the same dataset and metric."""
    base = {(r.task, r.dataset, r.metric): r for r in (facts.base_results or EvalSummary()).results}
    rows, summary = [], facts.results or EvalSummary()
    for row in summary.results:
        other = base.get((row.task, row.dataset, row.metric))
        delta = row.test_mean - other.test_mean if other and row.test_mean is not None else None
        # A synthetic or smoke set stays in the body, marked, and out of the metadata (card_index.hub_spec).
        rows.append({**row.to_dict(), "task_name": TASK_NAMES.get(row.task, row.task),
                     "synthetic": is_synthetic(summary, row),
                     "base": other.to_dict() if other else None, "delta": delta})
    return rows


def results_table(facts: CardFacts) -> dict | None:
    """Header and cells of the results table (None when the encoder was not evaluated)."""
    rows = results_rows(facts)
    if not rows:
        return None
    compared = [_capital(facts.base_label), "Δ"] if facts.base_results else []
    header = ["Task", "Dataset", "Metric", facts.model_name] + compared
    cells = []
    for r in rows:
        line = [r["task_name"], r["dataset"], r["metric"], score(r["test_mean"], r["test_ci95"])]
        if facts.base_results:
            base = r["base"]
            line += [score(base["test_mean"], base["test_ci95"]) if base else "not run", signed(r["delta"])]
        cells.append(line)
    synthetic = [r["dataset"] for r in rows if r["synthetic"]]
    return {"header": header, "rows": cells, "synthetic": synthetic}


def family_table(facts: CardFacts) -> dict | None:
    """Header and cells of the per-family means (None when the summary has none)."""
    rows = family_rows(facts)
    if not rows:
        return None
    compared = [_capital(facts.base_label), "Δ"] if facts.base_results else []
    header = ["Task family (mean)", facts.model_name] + compared
    cells = [[r["task"], score(r["mean"])] + ([score(r["base"]), signed(r["delta"])] if facts.base_results else [])
             for r in rows]
    return {"header": header, "rows": cells}


def protocol_sentence(facts: CardFacts) -> str:
    """How the scores were obtained, from the summary's protocol block."""
    results = facts.results or EvalSummary()
    protocol = results.protocol
    seeds = len(protocol.seeds) if isinstance(protocol.seeds, list) else protocol.seeds
    how = ("with frozen hidden states (`--frozen`: only the task head trains, a probe of the representation; the "
           "paper fine-tunes the whole model, section 2)" if protocol.frozen
           else "following the paper's fine-tuning protocol (section 2)")
    text = (f"Evaluated with `hf-encoderize eval` (profile `{results.profile}`, {results.mode} "
            f"attention) {how}: learning rates "
            f"{', '.join(str(lr) for lr in protocol.lrs or [])}, {seeds} seed(s), batch size "
            f"{protocol.batch_size}, {'' if protocol.frozen else 'at most '}"
            f"{protocol.max_steps} steps, "
            f"{100 * float(protocol.warmup_ratio or 0):.0f}% warmup. Selection: {protocol.selection}. "
            "Scores are on a 0-100 scale; ± is the 95% confidence interval over seeds (none with one seed).")
    if facts.base_results:
        base = facts.base_results
        text += (f" The {facts.base_label} column is `{base.model_name}` evaluated the same way "
                 f"({base.mode} attention, profile `{base.profile}`).")
    if results.profile != "paper":
        text += (f" The `{results.profile}` profile uses data subsets and fewer runs than the paper: compare "
                 "its numbers only with runs of the same profile.")
    return text


def family_rows(facts: CardFacts) -> list[dict]:
    """Mean score per task family for the encoder and, where evaluated, the base model."""
    mine = (facts.results or EvalSummary()).family_means or {}
    theirs = (facts.base_results or EvalSummary()).family_means or {}
    return [{"task": TASK_NAMES.get(task, task), "mean": mean, "base": theirs.get(task),
             "delta": mean - theirs[task] if theirs.get(task) is not None and mean is not None else None}
            for task, mean in mine.items()]


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def mteb_table(facts: CardFacts) -> dict | None:
    """Header and cells of the MTEB zero-shot scores (None when `eval --mteb` was not run): each task's main score
    per split on mteb's 0-100 scale; a local collection is marked (it stays out of the metadata)."""
    from hf_encoderize.publish.card_index import is_mteb_task

    if not facts.mteb or not facts.mteb.tasks:
        return None
    cells = []
    for task, row in facts.mteb.tasks.items():
        shown = task if is_mteb_task(task) else f"{task} (local collection: not in the metadata)"
        for split, value in (row.get("splits") or {}).items():
            cells.append([shown, row.get("main_score") or "?", split, f"{value:.2f}"])
    return {"header": ["MTEB task", "Main score", "Split", facts.model_name], "rows": cells,
            "version": facts.mteb.mteb_version}
