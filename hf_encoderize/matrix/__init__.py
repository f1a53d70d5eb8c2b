"""The architecture matrix: which model types encoderize, and whether their saved encoders round-trip through
plain transformers."""
