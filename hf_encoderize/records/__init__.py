"""The records the stages hand each other, typed: one module per file format, each record built by one writer and
read by attribute only.

- `fields`: the base every record shares: typed fields first, every other key of the file kept whole in `facts`, so a
  record written by an older or newer version reads and re-writes without loss;
- `run_record`: `run_record.json` (what a `cpt` or `pretrain` run was and did; the model card's main source);
- `eval_summary`: `eval/<name>/summary.json` (one model's scores under the paper's protocol);
- `contrastive_record`: `contrastive_run.json` (the contrastive stage of an embedding model);
- `encoder_facts`: the `hf_encoderize` block of a saved encoder's config.json;
- `push_record`: `push_record.json` (what `run` pushed, so an unchanged folder is not pushed twice);
- `export_record`: `export_record.json` (what `export` kept of each format and why; the card's "Serve it" section);
- `learnt`: the one table of what a run can learn (contrastive methods, masking targets, phases) and the names the
  card, the run record and the metrics give each.

The paths of these files are `common.run_folder`'s; this package sits just above `common` so every stage that writes
or reads a record can import it.
"""
