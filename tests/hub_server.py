"""Test helpers for the card, push and run tests: a fake Hugging Face Hub on 127.0.0.1 and a schema-exact run folder.

`FakeHub` implements the endpoints huggingface_hub's `create_repo`, `create_branch`, `upload_folder` (preupload and
the NDJSON commit, regular upload mode), `create_pull_request` and `repo_info` call, checks the bearer token, and
records every repo, commit and file it receives, so tests assert what really went over HTTP. It also serves files for
`hf_hub_download` (HEAD and GET `/{repo}/resolve/{revision}/{path}`) from what `serve` was given. The `fake_hub` fixture
points `HF_ENDPOINT` at it, sets `HF_TOKEN` and lifts the suite's `HF_HUB_OFFLINE=1` for the test's duration.

Use it from any test module: `from hub_server import fake_hub, make_run_folder  # noqa: F401`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

TOKEN = "hf_testTOKEN0123456789abcdefghijklmnopqrstu"  # the string test_hub scans the uploaded set for


class FakeHub:
    """A running fake Hub. `repos[repo_id]` holds type, private, sdk and the list of commits with their files."""

    def __init__(self, token: str = TOKEN, user: str = "tester"):
        self.token, self.user = token, user
        self.repos: dict[str, dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.served: dict[tuple[str, str, str], bytes] = {}  # (repo_id, revision, path) -> bytes, for downloads
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def serve(self, repo_id: str, revision: str, files: dict[str, bytes]) -> None:
        """Let `hf_hub_download(repo_id, path, revision=revision)` fetch each of `files` (path -> bytes)."""
        self.served.update({(repo_id, revision, path): data for path, data in files.items()})

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        """The repo's content at `revision` after every commit so far."""
        content: dict[str, bytes] = {}
        for commit in self.repos[repo_id]["commits"]:
            if commit["revision"] == revision:
                content.update(commit["files"])
        return content


def _handler(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep test output clean
            pass

        def _reply(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _authorized(self) -> bool:
            if self.headers.get("Authorization") == f"Bearer {hub.token}":
                return True
            self._reply(401, {"error": "Invalid credentials in Authorization header"})
            return False

        def _resolve(self, parts: list[str], body: bool) -> bool:
            """A served file at `/{namespace}/{name}/resolve/{revision}/{path}`, with the headers hf_hub_download
            reads (the commit, an ETag, the size); False when the path is not one."""
            if len(parts) < 5 or parts[2] != "resolve":
                return False
            data = hub.served.get((f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])))
            if data is None:
                self._reply(404, {"error": "Entry not found"})
                return True
            self.send_response(200)
            self.send_header("X-Repo-Commit", parts[3])
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)
            return True

        def do_HEAD(self):  # noqa: N802
            path = urlsplit(self.path).path
            hub.requests.append(("HEAD", path))
            if not self._resolve([unquote(p) for p in path.split("/")[1:]], body=False):
                self._reply(404, {"error": f"fake hub: no HEAD {path}"})

        def do_GET(self):  # noqa: N802 (http.server's naming)
            path = urlsplit(self.path).path
            hub.requests.append(("GET", path))
            parts = [unquote(p) for p in path.split("/")[1:]]
            if self._resolve(parts, body=True):
                return
            if path == "/api/whoami-v2":
                return self._reply(200, {"name": hub.user, "type": "user"}) if self._authorized() else None
            if len(parts) >= 4 and parts[0] == "api" and parts[4:5] == ["discussions"]:
                return self._reply(200, _discussion(parts))
            if len(parts) >= 5 and parts[0] == "api" and parts[4] == "revision":
                repo = hub.repos.get(f"{parts[2]}/{parts[3]}")
                if repo is None:
                    return self._reply(404, {"error": "Repository not found"})
                return self._reply(200, {"id": f"{parts[2]}/{parts[3]}", "sha": "0" * 40, "private": repo["private"]})
            self._reply(404, {"error": f"fake hub: no GET {path}"})

        def do_POST(self):  # noqa: N802
            path, query = urlsplit(self.path).path, urlsplit(self.path).query
            hub.requests.append(("POST", path))
            body = self._body()
            if not self._authorized():
                return
            parts = [unquote(p) for p in path.split("/")[1:]]
            if path == "/api/repos/create":
                return self._create(json.loads(body))
            if path == "/api/validate-yaml":
                return self._reply(200, _validate_yaml(json.loads(body)["content"]))
            repo_id = f"{parts[2]}/{parts[3]}" if len(parts) > 4 else ""
            if repo_id not in hub.repos:
                return self._reply(404, {"error": "Repository not found"})
            action, rest = parts[4], "/".join(parts[5:])
            if action == "preupload":
                files = json.loads(body)["files"]
                return self._reply(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                                                    "oid": None} for f in files]})
            if action == "commit":
                return self._commit(repo_id, rest, body, "create_pr=1" in query)
            if action == "branch":
                hub.repos[repo_id]["branches"].add(rest)
                return self._reply(200, {})
            if action == "discussions":
                hub.repos[repo_id]["prs"] += 1
                return self._reply(200, {"num": hub.repos[repo_id]["prs"]})
            self._reply(404, {"error": f"fake hub: no POST {path}"})

        def _create(self, payload: dict) -> None:
            repo_id = f"{payload.get('organization') or hub.user}/{payload['name']}"
            if repo_id in hub.repos:
                return self._reply(409, {"error": "You already created this model repo", "url": repo_id})
            hub.repos[repo_id] = {"type": payload.get("type") or "model", "sdk": payload.get("sdk"),
                                  "private": payload.get("visibility") == "private", "commits": [],
                                  "branches": {"main"}, "prs": 0}
            prefix = "" if hub.repos[repo_id]["type"] == "model" else f"{hub.repos[repo_id]['type']}s/"
            self._reply(200, {"url": f"{hub.endpoint}/{prefix}{repo_id}"})

        def _commit(self, repo_id: str, revision: str, body: bytes, create_pr: bool) -> None:
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            header = next(line["value"] for line in lines if line["key"] == "header")
            files = {line["value"]["path"]: base64.b64decode(line["value"]["content"])
                     for line in lines if line["key"] == "file"}
            revision = unquote(revision)
            if revision not in hub.repos[repo_id]["branches"] and not revision.startswith("refs/pr/"):
                return self._reply(404, {"error": f"Invalid rev id: {revision}"})
            hub.repos[repo_id]["commits"].append({"revision": revision, "message": header["summary"],
                                                  "description": header.get("description", ""), "files": files,
                                                  "create_pr": create_pr})
            oid = hashlib.sha1(body).hexdigest()
            self._reply(200, {"commitUrl": f"{hub.endpoint}/{repo_id}/commit/{oid}", "commitOid": oid,
                              "pullRequestUrl": f"{hub.endpoint}/{repo_id}/discussions/1" if create_pr else None})

    return Handler


def _validate_yaml(content: str) -> dict:
    """Like the Hub: the README's front matter must be a YAML mapping; a model-index must parse."""
    import yaml
    from huggingface_hub import ModelCardData

    if not content.startswith("---\n"):
        return {"errors": [], "warnings": [{"message": "Empty or missing yaml metadata in repo card"}]}
    try:
        metadata = yaml.safe_load(content.split("---\n")[1])
        ModelCardData(**metadata)
    except Exception as err:  # report like the Hub does, as a validation error
        return {"errors": [{"message": f"invalid metadata: {err}"}], "warnings": []}
    return {"errors": [], "warnings": []}


def _discussion(parts: list[str]) -> dict:
    num = int(parts[5])
    return {"title": "PR", "num": num, "author": {"name": "tester"}, "createdAt": "2025-01-01T00:00:00.000Z",
            "status": "draft", "repo": {"name": f"{parts[2]}/{parts[3]}", "type": parts[1].rstrip("s")},
            "isPullRequest": True, "events": [], "changes": {"base": "refs/heads/main"}, "filesWithConflicts": []}


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    """A fake Hub with HF_ENDPOINT/HF_TOKEN pointing at it, online mode, and no login cache of the real user."""
    from huggingface_hub import constants

    hub = FakeHub()
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_TOKEN", hub.token)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-login-cache" / "token"))
    yield hub
    hub.close()


# ------------------------------------------------------------------------------------------------ a run folder


def run_record(base_model: str, **overrides) -> dict:
    """A run_record.json with every key of the shared contract (what `cpt` writes)."""
    record = {
        "command": "cpt", "hf_encoderize_version": "0.1.0", "base_model": base_model, "revision": None,
        "gguf_file": None,
        "encoderize": {"model_type": "llama", "attn_implementation": "sdpa", "mask_token": "<mask>",
                       "mask_token_path": "added", "modules_patched": 2, "causal_buffers_replaced": 0},
        "objective": "mlm", "mask_ratio": 0.4, "replacement": "mask",
        "data": {"dataset": "HuggingFaceFW/fineweb-edu", "dataset_config": "sample-10BT", "data_files": None,
                 "seq_len": 64, "pack": True},
        "steps": 1200, "tokens_seen": 614400, "lr": 1e-4, "warmup_steps": 120, "decay_fraction": 0.05,
        "schedule": "wsd", "batch_size": 8, "grad_accum": 1, "num_processes": 1, "lora": None, "load_in_4bit": False,
        "hardware": {"device": "cpu", "gpu_name": None, "num_processes": 1, "mixed_precision": "no",
                     "torch": "2.13.0", "transformers": "5.23.0"},
        "wall_time_s": 3725.4, "final_train_loss": 3.2514, "eval_loss": 3.3012, "eval_masked_accuracy": 0.4217,
        "started_at": "2025-07-01T10:00:00Z", "finished_at": "2025-07-01T11:02:05Z",
    }
    record.update(overrides)
    return record


def summary(model: str, mode: str = "bidirectional", shift: float = 0.0) -> dict:
    """A summary.json with every key of the shared contract (what `eval` writes); `shift` moves every score."""
    protocol = {"lrs": [2e-5, 5e-5, 1e-4], "seeds": [0, 1, 2], "batch_size": 32, "max_steps": 1000,
                "warmup_ratio": 0.1, "selection": "best validation mean"}
    rows = [("sc", "sst2", "accuracy", 88.123456, {}), ("tc", "conll2003", "f1", 71.987654, {}),
            ("qa", "squad", "f1", 64.5, {"em": 52.25}), ("ir", "msmarco", "ndcg@10", 30.0417,
                                                         {"mrr@10": 25.5, "recall@100": 80.125})]
    results = []
    for task, dataset, metric, score, extra in rows:
        score += shift
        results.append({
            "task": task, "dataset": dataset, "metric": metric, "best_lr": 5e-5, "test_mean": score,
            "test_ci95": 0.731, "n_seeds": 3, "val_mean": score + 1, "lr_spread": 2.5,
            "per_lr": {"5e-05": {"val_mean": score + 1, "test_mean": score, "test_ci95": 0.731}},
            "extra_metrics": {k: v + shift for k, v in extra.items()},
            "note": "subset of 2,000 queries" if task == "ir" else None,
        })
    family = {r["task"]: r["test_mean"] for r in results}
    return {"model": model, "model_name": Path(model).name, "mode": mode, "profile": "quick", "protocol": protocol,
            "results": results, "family_means": family}


def make_run_folder(root: Path, *, evaluated: bool = True, base_evaluated: bool = True, **record) -> Path:
    """OUT/ as `run` leaves it: a real tiny encoder in encoder/, checkpoints/, run record, metrics, plots, eval."""
    from conftest import make_decoder, make_tokenizer

    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.saving import save_encoder

    out = root / "run"
    model, tokenizer = make_decoder(), make_tokenizer()
    report = encoderize(model, tokenizer)
    save_encoder(model, tokenizer, out / "encoder", metadata={**report.to_dict(), "base_model": str(root / "base")})
    (out / "checkpoints" / "step-0000010").mkdir(parents=True)
    (out / "checkpoints" / "step-0000010" / "optimizer.bin").write_bytes(b"optimizer state")
    (out / "run_record.json").write_text(json.dumps(run_record(str(root / "base"), **record), indent=2))
    (out / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 10, "loss": 3.2}) + "\n")
    (out / "loss_curve.png").write_bytes(b"\x89PNG\r\n\x1a\n fake loss curve")
    if evaluated:
        (out / "eval" / "encoder").mkdir(parents=True)
        (out / "eval" / "encoder" / "summary.json").write_text(json.dumps(summary(str(out / "encoder"))))
        (out / "eval" / "encoder" / "scores.png").write_bytes(b"\x89PNG\r\n\x1a\n fake scores")
    if base_evaluated:
        (out / "eval" / "base").mkdir(parents=True)
        (out / "eval" / "base" / "summary.json").write_text(json.dumps(summary(str(root / "base"), "causal", -5.0)))
    return out
