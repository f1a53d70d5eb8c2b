"""`push_record.json`: what `run` pushed, so a re-run with the same files and target skips the push."""

from __future__ import annotations

from dataclasses import dataclass, field

from hf_encoderize.records.fields import Fields


@dataclass
class PushRecord(Fields):
    """`push_record.json` in OUT, written by `run`'s push stage (`pipeline.run.stage_push`), read by its reuse check
    (`pipeline.reuse.push_done`). Never the token."""

    repo_id: str | None = None
    """The Hub repo the files went to."""
    revision: str | None = None
    """The branch pushed to (main unless --hub-revision)."""
    create_pr: bool | None = None
    files: list = field(default_factory=list)
    """The repo paths pushed."""
    fingerprint: str | None = None
    """`pipeline.reuse.files_fingerprint` of the pushed files, taken after the card was rewritten."""
    pushed_at: str | None = None
