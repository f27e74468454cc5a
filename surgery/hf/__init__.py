"""HF transformers side of spec-surgery: the tiny Gemma 4 pair, KV routing, speculative decoding."""
