"""The commands that make a model: `convert` (no training), `cpt`, `pretrain` and `contrastive`."""
