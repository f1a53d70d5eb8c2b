"""`run` (every stage into one run folder) and the offline quickstart on the embedded default model."""
