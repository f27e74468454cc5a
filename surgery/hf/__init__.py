"""HF transformers side of spec-surgery: loaders, speculative decoding, the HF apply command (the tiny
pair itself is surgery/tinymodels/tinypair.py, its KV routing surgery/live/kvrouting.py).

``surgery.hf.speculative_decoding`` is a transformers decoding method (``generate(...,
custom_generate=surgery.hf.speculative_decoding)``); it is imported on first use so that importing
this package does not import torch."""


def __getattr__(name):
    if name == "speculative_decoding":
        from .generate import speculative_decoding

        return speculative_decoding
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
