"""What the model learns: masking, the targets (CLM, MLM, MNTP, or a registered one) and phases, and the loss with its
kernels."""
