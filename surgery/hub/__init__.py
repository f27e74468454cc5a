"""Models named by hub id: resolved through the Hugging Face cache, then the hub, reading only what
the checks need (configs, tokenizer files, safetensors headers, a bounded range of one small tensor).

- `settings`: HF_ENDPOINT / HF_HOME / HF_HUB_CACHE / HF_HUB_OFFLINE / timeouts, read when used;
- `http`: bounded requests (time, size, redirects, retries) with the hub's errors mapped to codes;
- `cache`: the HF cache, read through huggingface_hub's own functions and written in its layout,
  plus our store of the byte ranges read from weight files (so an offline rerun needs nothing);
- `ledger`: what was fetched, for `--json` and the benchmarks;
- `source`: `HubSource`, the `surgery.modelref.ModelSource` of a hub model.

Imported only when a hub reference is given (surgery.modelref.open_model).
"""
