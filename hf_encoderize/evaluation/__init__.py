"""`hf-encoderize eval`: the paper's fine-tuning suite (section 2, Appendix B) for any encoder.

The pipeline, one module each: datasets as canonical rows (`loaders`: the twelve Hub datasets; `synthetic`: offline
sets), the model under test (`backbone`: native encoder, encoderized decoder or causal decoder, weights reused across
runs), the shared fine-tuning loop (`base`), one file per task family (`sc`, `tc`, `qa`, `ir`), the protocol
(`config`), the grid runner with resume (`grid`), the outputs (`summary`, `plots`, `compare`), and the statistics
behind them (`stats`: Welch, TOST and their limits; `bootstrap`: intervals over test examples).

From Python:

    from hf_encoderize.evaluation import EvalConfig, evaluate
    from hf_encoderize.model.loading import LoadConfig

    summary = evaluate(LoadConfig("runs/tiny/encoder"), EvalConfig(profile="smoke", output_dir="results"))
"""

from hf_encoderize.evaluation.config import EvalConfig

# `compare` stays in its module (`from hf_encoderize.evaluation.compare import compare`): a package attribute of the
# same name would be replaced by the submodule as soon as it is imported.
__all__ = ["EvalConfig", "evaluate"]


def __getattr__(name: str):
    # Lazy: keep `import hf_encoderize.evaluation` free of torch until a run starts.
    if name == "evaluate":
        from hf_encoderize.evaluation.grid import evaluate

        return evaluate
    raise AttributeError(f"module 'hf_encoderize.evaluation' has no attribute {name!r}")
