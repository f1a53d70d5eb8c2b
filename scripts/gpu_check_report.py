"""`gpu_check.py`'s table, summary line and output files (gpu_check.md, gpu_check.json) from its rows."""

from __future__ import annotations

import json
from dataclasses import asdict


def render_table(rows: list) -> str:
    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| row | status | wall s | key figure | reason |", "|---|---|---|---|---|"]
    lines += [f"| {cell(r.name)} | {r.status} | {r.wall_s:.1f} | {cell(r.figure)} | {cell(r.reason)} |" for r in rows]
    return "\n".join(lines)


def summary_line(rows: list, facts: dict, wall_s: float) -> str:
    counts = {status: sum(r.status == status for r in rows) for status in ("pass", "fail", "skipped")}
    return (f"{counts['pass']} pass, {counts['fail']} fail, {counts['skipped']} skipped in {wall_s:.0f} s on "
            f"{facts.get('device')} (torch {facts.get('torch')}, transformers {facts.get('transformers')}, "
            f"Python {facts.get('python')})")


def write_outputs(ctx, rows: list, facts: dict, wall_s: float) -> str:
    table = render_table(rows)
    summary = summary_line(rows, facts, wall_s)
    (ctx.out / "gpu_check.md").write_text(f"# GPU check\n\n{summary}\n\n{table}\n")
    payload = {"summary": summary, "smoke": ctx.smoke, "wall_s": round(wall_s, 1), **facts,
               "exit_code": exit_code(rows), "rows": [asdict(row) for row in rows]}
    (ctx.out / "gpu_check.json").write_text(json.dumps(payload, indent=2) + "\n")
    return f"{table}\n\n{summary}"


def exit_code(rows: list) -> int:
    return 1 if any(row.status == "fail" for row in rows) else 0
