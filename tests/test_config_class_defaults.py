"""Oracle for surgery/data/config_class_defaults.json (issue 42): the facts apply a missing field's
default the way the installed transformers does.

1. The file is what tools/gen_config_class_defaults.py writes from the installed transformers (rerun it
   when this fails after a transformers upgrade).
2. For every model type a shipped recipe applies to that transformers knows, a config built from the
   class's own defaults with one field removed gives the facts the class's value for that field: what
   `CONFIG_MAPPING[model_type]()` holds after its `__post_init__` (head_dim / KV-head derivations
   included)."""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from testpaths import ROOT  # noqa: E402

pytest.importorskip("transformers")

FACT = {"num_key_value_heads": "num_kv_heads"}  # config key -> fact name, where they differ
KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
        "num_kv_shared_layers", "backbone_hidden_size", "tie_word_embeddings", "bos_token_id", "eos_token_id",
        "pad_token_id")


def test_the_file_is_the_installed_transformers_defaults():
    import gen_config_class_defaults as gen

    written = json.loads((ROOT / "surgery" / "data" / "config_class_defaults.json").read_text())
    assert written == json.loads(gen.render(gen.data()))


def _recipe_model_types() -> list[str]:
    from surgery.recipe import load_recipe
    from surgery.resources import shipped_recipes

    types = set()
    for path in shipped_recipes():
        for sel in load_recipe(path).applies_to.values():
            types.update(sel.get("model_type") or ())
    return sorted(types)


def _plain(value):
    if isinstance(value, list):
        ids = sorted(v for v in value if isinstance(v, int))
        return ids[0] if len(ids) == 1 else ids
    return value


def test_a_removed_field_gets_the_value_transformers_gives():
    from transformers import CONFIG_MAPPING

    from surgery.text.diagnostics import SurgeryError
    from surgery.facts import facts_from_config

    warnings.filterwarnings("ignore")
    checked, wrong = 0, []
    for model_type in _recipe_model_types():
        if model_type not in CONFIG_MAPPING:
            continue
        try:
            full = json.loads(CONFIG_MAPPING[model_type]().to_json_string(use_diff=False))
        except Exception:
            continue
        if "text_config" in full or not isinstance(full.get("num_hidden_layers"), int):
            continue  # composite configs: their text model type is checked on its own
        try:
            facts_from_config(dict(full, model_type=model_type), f"{model_type}.json")
        except SurgeryError:
            continue  # the class's own defaults are no servable model (glm5_next_text: head_dim 0)
        for key in KEYS:
            if full.get(key) is None or key == "num_hidden_layers" and full.get("layer_types"):
                continue
            if key == "head_dim" and "qk_rope_head_dim" in full:
                continue  # MLA: transformers sets head_dim = qk_rope_head_dim, no width vLLM's attention uses
            cfg = {k: v for k, v in full.items() if k != key}
            try:
                facts = facts_from_config(dict(cfg, model_type=model_type), f"{model_type}.json")
            except Exception as exc:  # a field the facts need with no class default: not this check's case
                raise AssertionError(f"{model_type} without {key}: {exc}") from exc
            expected = CONFIG_MAPPING[model_type](**{k: v for k, v in cfg.items() if k != "model_type"})
            want = _plain(getattr(expected, key, None)) if key != "head_dim" else expected.to_dict().get("head_dim")
            got = facts.scalars.get(FACT.get(key, key))
            if key == "tie_word_embeddings":
                got, want = bool(got), bool(want)
            if got != want:
                wrong.append((model_type, key, got, want))
            checked += 1
    assert wrong == [], "\n".join(map(str, wrong))
    assert checked >= 100


def test_the_hand_table_agrees_with_the_class_defaults_it_overlays():
    """config_defaults.yaml sits over the generated class defaults; where both name a key they agree."""
    from surgery.facts.fromconfig import class_defaults, defaults_table

    generated = class_defaults()
    clash = [(family, key, value, generated[family][key]) for family, values in defaults_table().items()
             if family != "*" for key, value in values.items()
             if key in generated.get(family, {}) and generated[family][key] != value]
    assert clash == []
