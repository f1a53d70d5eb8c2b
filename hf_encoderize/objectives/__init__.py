"""What the model learns: MLM/MNTP masking, CLM and MLM phases, and the MLM loss with its kernels."""
