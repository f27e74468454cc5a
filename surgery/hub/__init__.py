"""Models named by hub id: resolved through the Hugging Face cache, then the hub, reading only what
the checks need (configs, tokenizer files, safetensors headers, a bounded range of one small tensor).

- `settings`: HF_ENDPOINT / HF_HOME / HF_HUB_CACHE / HF_HUB_OFFLINE / timeouts, read when used;
- `wire`: urllib with one absolute deadline on every socket read (headers and interim answers too);
- `http`: bounded requests (time, size, redirects, retries) with every failure mapped to a code;
- `names`: names from the network checked against the hub's own forms before they become paths;
- `digests`: what a blob id says about a file's bytes, checked before a blob is stored or linked;
- `entries`: one cache entry read only as a regular file, bounded (no FIFO, device or link loop);
- `cache`: the HF cache in huggingface_hub's layout, plus our store of the byte ranges read from
  weight files (so an offline rerun needs nothing);
- `download`: a whole model into the cache (convert, apply --engine hf), bounded and verified;
- `ledger`: what was fetched, for `--json` and the benchmarks;
- `source`: `HubSource`, the `surgery.facts.modelref.ModelSource` of a hub model.

Imported only when a hub reference is given (surgery.facts.modelref.open_model).
"""
