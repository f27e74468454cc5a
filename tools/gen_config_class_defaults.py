"""Write surgery/data/config_class_defaults.json: for every model type the installed transformers
knows, the declared defaults of its config class for the fields surgery's facts read (issue 42):
what transformers sets when a config.json omits the key. Declared defaults only (the dataclass
field / `__init__` default); a None default is left out, because the class then derives the value
in `__post_init__` (head_dim = hidden_size // num_attention_heads, num_key_value_heads =
num_attention_heads), which surgery/facts/fromconfig.py does the same way. The facts read this file
without importing transformers; tests/test_config_class_defaults.py fails when it and the installed
transformers disagree; rerun this then:

    PYTHONPATH=$PWD .venv/bin/python tools/gen_config_class_defaults.py
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "surgery" / "data" / "config_class_defaults.json"
# the fields surgery/facts/fromconfig.py reads through its defaults
KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
        "num_kv_shared_layers", "backbone_hidden_size", "max_position_embeddings", "tie_word_embeddings",
        "bos_token_id", "eos_token_id", "pad_token_id")


def _declared(cls) -> dict:
    if dataclasses.is_dataclass(cls):
        out = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
        return out
    params = inspect.signature(cls.__init__).parameters
    return {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}


def _plain(value) -> bool:
    if isinstance(value, bool) or (isinstance(value, int) and not isinstance(value, bool)):
        return True
    return isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def data() -> dict:
    import transformers
    from transformers import CONFIG_MAPPING

    warnings.filterwarnings("ignore")
    out = {}
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            declared = _declared(CONFIG_MAPPING[model_type])
        except Exception:  # a lazily registered class that cannot be imported here
            continue
        found = {k: declared[k] for k in KEYS if k in declared and declared[k] is not None and _plain(declared[k])}
        if found:
            out[model_type] = found
    return {"transformers": transformers.__version__, "keys": list(KEYS), "defaults": out}


def render(d: dict) -> str:
    return json.dumps(d, indent=0, sort_keys=True, separators=(",", ":")) + "\n"


if __name__ == "__main__":
    OUT.write_text(render(data()), encoding="utf-8")
    print(f"wrote {OUT} ({len(data()['defaults'])} model types)")
