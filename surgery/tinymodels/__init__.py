"""The built-in tiny models' own pieces: the byte-level vocabulary every built-in pair shares
(`bytevocab`), its tokenizer files (`bytetokenizer`) and the tiny Gemma 4 pair's files and cache
(`tinypair`). The pair index and `pair export` are surgery/pairs.py."""
