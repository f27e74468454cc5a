"""The byte-level vocabulary every built-in pair shares (the Gemma 4 pair and the family pairs).

Gemma's special ids (pad 0, eos 1, bos 2) are kept so the configs read like the real ones; byte b
is token b + BYTE_OFFSET. Ids 3 and 260..263 are unused padding. Engine-neutral and free of imports:
the vLLM runs, the HF demo, the tokenizer files (surgery/tinymodels/bytetokenizer.py) and the builders in
tools/ all encode with it.
"""
from __future__ import annotations

PAD_ID, EOS_ID, BOS_ID = 0, 1, 2
BYTE_OFFSET = 4
VOCAB_SIZE = 264


def encode(text: str, bos: bool = True) -> list[int]:
    """Byte-level encoding; prepends BOS by default (the pairs were trained with it)."""
    ids = [b + BYTE_OFFSET for b in text.encode("utf-8")]
    return [BOS_ID, *ids] if bos else ids


def decode(ids) -> str:
    """Inverse of :func:`encode`; special and unused ids are dropped."""
    data = bytes(int(i) - BYTE_OFFSET for i in ids if BYTE_OFFSET <= int(i) < BYTE_OFFSET + 256)
    return data.decode("utf-8", errors="replace")
