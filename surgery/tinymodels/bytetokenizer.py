"""The byte-level tokenizer of the built-in tiny pairs, as files vLLM and transformers load.

The tiny pairs were trained on bytes (`surgery.tinymodels.bytevocab.encode`: byte b is token b + BYTE_OFFSET, BOS
prepended; ids 0/1/2 are pad/eos/bos as in Gemma). This module writes the same mapping as a
`tokenizer.json` built with the `tokenizers` library, so a server started on the pair's folders
takes text in and gives text out, without `--skip-tokenizer-init` and token-id prompts.

Construction: GPT-2's byte-to-unicode alphabet (`pre_tokenizers.ByteLevel.alphabet()`) as a BPE
vocabulary without merges: every byte is one symbol, so each byte becomes exactly one token. The ids
are assigned in byte order (byte b -> b + BYTE_OFFSET), which is what the weights were trained on.
No regex split and no prefix space: the text is encoded as its exact UTF-8 bytes. The output is a
pure function of these constants (sorted JSON), so the committed copies next to the tiny weights are
checked against a fresh build by the tests.
"""
from __future__ import annotations

import json
from pathlib import Path

from .bytevocab import BOS_ID, BYTE_OFFSET, EOS_ID, PAD_ID, VOCAB_SIZE

SPECIALS = {PAD_ID: "<pad>", EOS_ID: "<eos>", BOS_ID: "<bos>", 3: "<unk>"}
FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _byte_symbols() -> list[str]:
    """The printable stand-in of each byte 0..255 (GPT-2's bytes_to_unicode), in byte order."""
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = set(ByteLevel.alphabet())
    # GPT-2's table: printable Latin-1 bytes map to themselves, the others to 256 + n in byte order
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    symbols, extra = [], 0
    for b in range(256):
        if b in printable:
            symbols.append(chr(b))
        else:
            symbols.append(chr(256 + extra))
            extra += 1
    if set(symbols) != alphabet:  # the library's alphabet is the same table; refuse to drift from it
        raise RuntimeError("tokenizers' ByteLevel alphabet differs from the GPT-2 byte table")
    return symbols


def build_tokenizer():
    """A `tokenizers.Tokenizer` equal to `bytevocab.encode` (BOS added by the post-processor)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {sym: b + BYTE_OFFSET for b, sym in enumerate(_byte_symbols())}
    vocab.update({tok: i for i, tok in SPECIALS.items()})
    if max(vocab.values()) >= VOCAB_SIZE:
        raise RuntimeError(f"tokenizer ids reach {max(vocab.values())}, the pair's vocab_size is {VOCAB_SIZE}")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=SPECIALS[3]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(SPECIALS[i], special=True, normalized=False) for i in sorted(SPECIALS)])
    bos = SPECIALS[BOS_ID]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, BOS_ID)])
    return tok


def tokenizer_files() -> dict[str, str]:
    """File name -> text of every tokenizer file (deterministic: sorted JSON)."""
    tok_json = json.dumps(json.loads(build_tokenizer().to_str()), indent=1, sort_keys=True, ensure_ascii=False)
    specials = {"bos_token": SPECIALS[BOS_ID], "eos_token": SPECIALS[EOS_ID], "pad_token": SPECIALS[PAD_ID],
                "unk_token": SPECIALS[3]}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "add_bos_token": True,  # done by tokenizer.json's post-processor; stated for readers
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        **specials,
    }
    return {
        "tokenizer.json": tok_json + "\n",
        "tokenizer_config.json": json.dumps(config, indent=2, sort_keys=True) + "\n",
        "special_tokens_map.json": json.dumps(specials, indent=2, sort_keys=True) + "\n",
    }


def write_tokenizer(folder: str | Path) -> list[Path]:
    """Write the tokenizer files into `folder` (a model folder); returns the paths written."""
    folder = Path(folder)
    out = []
    for name, text in tokenizer_files().items():
        (folder / name).write_text(text, encoding="utf-8")
        out.append(folder / name)
    return out
