"""Run llama.cpp's own converter (`convert_hf_to_gguf.py`) on a saved encoder, adding the pooling type it leaves out.

Run as `python gguf_convert.py CONVERTER_DIR MODEL_DIR OUTTYPE=OUTFILE [OUTTYPE=OUTFILE ...]` (OUTTYPE: f32, f16,
q8_0); one process converts to every type, so torch and the vocabulary load once. Imports nothing from hf_encoderize:
it runs beside the converter's own `gguf-py` (the converter puts it first on sys.path), never the PyPI `gguf` the
package loads GGUF files with, so the two versions cannot clash.

Why a wrapper and not the converter's command line: the converter writes `<arch>.attention.causal = false` for every
architecture when config.json has `is_causal: false` (ours do), but reads the sentence-transformers Pooling module
(`_try_set_pooling_type`, from modules.json) only in some architectures' classes (Qwen2, Gemma 3, BERT), not in
Llama's. A GGUF without a pooling type is pooled as "none" by llama.cpp, so every class gets the call here, after its
own parameters (a second call only overwrites the key with the same value).
"""

import sys


def main(converter: str, model: str, outputs: list[str]) -> None:
    sys.path.insert(0, converter)
    import convert_hf_to_gguf  # inserts the converter's gguf-py on sys.path; defines main()

    try:
        from conversion import TextModel  # llama.cpp since 2026: the architectures' classes live in conversion/
    except ImportError:
        TextModel = convert_hf_to_gguf.TextModel  # a checkout from before: all in convert_hf_to_gguf.py

    set_parameters = TextModel.set_gguf_parameters

    def with_pooling(self):
        set_parameters(self)
        self._try_set_pooling_type()

    TextModel.set_gguf_parameters = with_pooling
    for output in outputs:
        outtype, outfile = output.split("=", 1)
        sys.argv = ["convert_hf_to_gguf.py", model, "--outtype", outtype, "--outfile", outfile]
        convert_hf_to_gguf.main()


if __name__ == "__main__":
    sys.modules["hf_encoderize"] = None  # any `import hf_encoderize` now raises ImportError
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
