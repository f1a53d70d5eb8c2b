"""Load a decoder, encoderize it (patch its attention to bidirectional, verify, isolate packed documents), and save
an encoder that plain transformers and sentence-transformers load.
"""
