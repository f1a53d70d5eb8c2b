"""Code shipped inside every saved encoder, not used as a template: `saving.py` copies `modeling_encoderize.py` next
to the weights (with MODEL_TYPE filled in) and `bidirectional.py` imports the same file for its attention patch."""
