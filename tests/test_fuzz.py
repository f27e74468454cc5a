"""Property-based fuzzing (hypothesis) of the four input surfaces: the recipe loader, the expression
language, the config reader and the resolver.

Property, for every generated input: the call either succeeds or raises `SurgeryError` (`ExprError`
when the expression module is called directly) carrying well-formed coded diagnostics; it makes fewer
than CALL_LIMIT function calls (tests/callcount.py: a count, the same on every machine; the CPU-time
bound this file asserted failed loaded machines, issue 48), and the loader stays under LOADER_MEM_MIB
of Python allocations (tracemalloc). CPU time per input is measured by bench/fuzz_long.py, which
times the calls instead of counting them and reports the slowest input against its time limit.

The default run is short (a few hundred examples per target, CI). The long campaign is opt-in:

    SURGERY_FUZZ_EXAMPLES=12500 python -m pytest -q -m slow tests/test_fuzz.py   # ~100k in all
    python bench/fuzz_long.py --minutes 12                                        # time-boxed, writes counts

The hand-picked broken inputs (one per failure mode, with exact locations) live in
tests/test_broken_inputs.py; this file throws volume at the same surfaces instead.
"""
from __future__ import annotations

import copy
import gc
import json
import math
import os
import random
import tracemalloc
import zlib
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from callcount import CALL_LIMIT, counted, timed
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from surgery import Runtime, SurgeryError, facts_from_config, parse_recipe, resolve
from surgery import expr as expr_lang
from surgery.text.diagnostics import catalogue
from surgery.facts import FACT_NAMES, parse_config_text
from surgery.recipe import RUNTIME_NAMES
from surgery.resources import shipped_recipes

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"

# bench/fuzz_long.py sets it False: it times each call (CPU seconds, a bench figure) instead of
# counting its function calls (the default suite's bound)
COUNT_CALLS = True
LOADER_MEM_MIB = 64
CI_EXAMPLES = int(os.environ.get("SURGERY_FUZZ_CI_EXAMPLES", "150"))
LONG_EXAMPLES = int(os.environ.get("SURGERY_FUZZ_EXAMPLES", "12500"))  # per target; 8 targets

# what the campaign saw: calls per target, outcomes, slowest call, most function calls, largest loader peak
STATS: dict[str, Counter] = {}
WORST: dict[str, dict[str, float]] = {}
EXAMPLES: Counter = Counter()  # inputs run per fuzz target (shrinking included)


# -- the property ----------------------------------------------------------------------------------

def _record(target: str, outcome: str, elapsed: float, peak: int = 0, args=(), calls: int | None = None) -> None:
    STATS.setdefault(target, Counter())[outcome] += 1
    w = WORST.setdefault(target, {"max_s": 0.0, "max_calls": 0, "max_peak_mib": 0.0})
    if calls is not None and calls > w["max_calls"]:
        w["max_calls"] = calls
        w["most_calls_input"] = repr(args[0])[:160] if args else ""
    if elapsed > w["max_s"]:
        w["max_s"] = elapsed
        w["slowest_input"] = repr(args[0])[:160] if args else ""
        w["slowest_input_chars"] = len(args[0]) if args and isinstance(args[0], str) else None
    w["max_peak_mib"] = max(w["max_peak_mib"], peak / (1 << 20))


def _check_diagnostics(exc: SurgeryError) -> None:
    assert exc.diagnostics, "SurgeryError without diagnostics"
    codes = catalogue()
    for d in exc.diagnostics:
        assert d.code in codes, d
        assert d.severity in ("error", "warning", "info"), d
        assert isinstance(d.message, str) and d.message, d
        d.render()
    str(exc)
    assert exc.exit_code in (1, 2)


def bounded(target: str, fn, *args, allowed=(SurgeryError,), mem_mib: int | None = None):
    """Call fn(*args): it returns or raises one of `allowed`; anything else propagates and fails the
    example. Its function calls are counted (under CALL_LIMIT), or, for bench/fuzz_long.py
    (COUNT_CALLS off), it is timed; with mem_mib it is repeated under tracemalloc and the allocation
    peak is checked. Returns the value or the error."""
    # the cyclic GC paused: a full collection of hypothesis' own objects landing inside the call cost
    # seconds (timed) and runs finalizers that are not the call's work (counted)
    gc_was_on = gc.isenabled()
    gc.disable()
    calls = None
    try:
        if COUNT_CALLS:
            result, calls, elapsed = counted(fn, *args, allowed=allowed)
        else:  # CPU time of this process: other load on the machine does not count
            result, elapsed = timed(fn, *args, allowed=allowed)
    finally:
        if gc_was_on:
            gc.enable()
    outcome = "ok" if not isinstance(result, allowed) else \
        f"{type(result).__name__}:{getattr(result, 'code', None) or _first_code(result)}"
    peak = 0
    if mem_mib is not None:
        tracemalloc.start()
        try:
            fn(*args)
        except allowed:
            pass
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    _record(target, outcome, elapsed, peak, args, calls)
    assert calls is None or calls < CALL_LIMIT, f"{target}: {calls} function calls for one input (limit {CALL_LIMIT})"
    if mem_mib is not None:
        assert peak < mem_mib << 20, f"{target}: tracemalloc peak {peak / (1 << 20):.1f} MiB (limit {mem_mib})"
    if isinstance(result, SurgeryError):
        _check_diagnostics(result)
    if isinstance(result, expr_lang.ExprError):
        assert result.code in catalogue() and isinstance(result.column, int)
    return result


def _first_code(exc) -> str:
    diags = getattr(exc, "diagnostics", None)
    return diags[0].code if diags else "?"


# -- shared data -----------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def recipe_texts() -> tuple[str, ...]:
    return tuple(p.read_text(encoding="utf-8") for p in shipped_recipes())


@lru_cache(maxsize=1)
def recipe_data() -> tuple[dict, ...]:
    return tuple(yaml.safe_load(t) for t in recipe_texts())


@lru_cache(maxsize=1)
def parsed_recipes() -> tuple:
    return tuple(parse_recipe(t, p.name) for t, p in zip(recipe_texts(), shipped_recipes()))


@lru_cache(maxsize=1)
def config_dicts() -> tuple[dict, ...]:
    return tuple(json.loads(p.read_text(encoding="utf-8")) for p in sorted(CONFIGS.glob("*.json")))


HUGE_INTS = [0, 1, -1, 2, 7, 13, 64, 255, 256, 4096, 4097, 2**31 - 1, 2**31, 2**31 + 1, 2**53 + 1, 2**63, -2**63,
             10**30, -10**30, 10**400]
INTERESTING_STR = ["", " ", "gemma4", "gemma4_assistant", "llama", "sliding_attention", "full_attention", "fp8",
                   "auto", "vllm", "hf", "é", "中文", "\u202e", "\ufeff", "\x00", "\\", "'", '"', "${HOME}", "../../etc",
                   "a" * 5000, "NaN", "Infinity", "-Infinity", "1e309", "true", "null", "~", "<<", "*a", "&a",
                   "!!python/object/apply:os.system", "__import__('os')"]
scalars = st.one_of(
    st.none(), st.booleans(), st.sampled_from(HUGE_INTS), st.integers(),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40), st.sampled_from(INTERESTING_STR),
)
json_values = st.recursive(
    scalars, lambda c: st.lists(c, max_size=5) | st.dictionaries(st.text(max_size=10), c, max_size=5),
    max_leaves=25)


# -- 1. recipe loader ------------------------------------------------------------------------------

HOSTILE_SNIPPETS = [
    "!!python/object/apply:os.system ['touch /tmp/pwned']", "!!python/name:os.system", "!!python/module:os",
    "!!python/object/new:os.system [x]", "!include ../../etc/passwd", "!custom 1", "!!binary aGVsbG8=",
    "!!set {a, b}", "!!omap [a: 1]", "!!timestamp 2001-12-14", "!<tag:yaml.org,2002:python/tuple> [1]",
    "&a", "*a", "*undefined", "<<: *a", "<<: [*a, *b]", "<<: 1", "<<: {a: 1}", ".nan", ".NaN", "-.inf", ".inf",
    "1e999", "-1e999", "1" * 5000, "-" + "9" * 400, "0x_", "0b_", "0o_", "0x1F", "0b101", "0o17", "1_000",
    "190:20:30", "2001-12-14t21:59:43.10-05:00", "~", "null", "yes", "No", "on", "=", "? [a, b]\n: c",
    "? a\n: b", "[" * 70, "{" * 70, "]" * 5, "}" * 5, "'unterminated", '"unterminated', '"\\x00\\uD800"',
    "\t", "\x00", "\x07", "\ufeff", "\u2028", "\ud800", "---", "...", "%YAML 1.1", "%TAG ! tag:x,2000:",
    "key: value\nkey: value", "{a: 1, a: 2}", "|", ">-", "#", "- - - - - x", "@", "`", "x" * 100_000,
    # issue 34: tagged texts PyYAML's constructors crash on (IndexError / ValueError / AttributeError)
    '!!int ""', "!!int ''", '!!float ""', '!!int "_"', '!!float "."', '!!int "-"', '!!float "+"', '!!bool ""',
    "!!int &a1 ''", '!!timestamp ""', '!!binary "!"', '!!merge ""', '!!value ""',
]
SCALAR_SPOTS = ["gemma4-mtp", "1", "pp_size == 1", "error", "skip", "target", "kv_source", "share_kv", "lm_head"]


def _mutate_text(text: str, rnd: random.Random, n: int) -> str:
    for _ in range(n):
        op = rnd.randrange(8)
        pos = rnd.randrange(len(text) + 1)
        if op == 0:
            text = text[:pos] + rnd.choice(HOSTILE_SNIPPETS) + text[pos:]
        elif op == 1:  # a snippet as a whole value after some `key:`
            i = text.find(": ", pos)
            if i >= 0:
                end = text.find("\n", i)
                end = len(text) if end < 0 else end
                text = text[:i + 2] + rnd.choice(HOSTILE_SNIPPETS) + text[end:]
        elif op == 2:
            text = text[:pos] + text[pos + rnd.randrange(1, 40):]
        elif op == 3:  # duplicate a line (duplicate keys)
            lines = text.split("\n")
            k = rnd.randrange(len(lines))
            lines.insert(k, lines[k])
            text = "\n".join(lines)
        elif op == 4:
            text = text[:pos] + chr(rnd.choice([rnd.randrange(0, 0x80), rnd.randrange(0x80, 0x3000),
                                                rnd.randrange(0xE000, 0x110000)])) + text[pos:]
        elif op == 5:  # re-indent a line
            lines = text.split("\n")
            k = rnd.randrange(len(lines))
            lines[k] = " " * rnd.randrange(0, 9) + lines[k].lstrip()
            text = "\n".join(lines)
        elif op == 6:
            spot = rnd.choice(SCALAR_SPOTS)
            text = text.replace(spot, rnd.choice(HOSTILE_SNIPPETS + INTERESTING_STR[:20]), 1)
        else:  # anchor a value, alias it elsewhere
            i = text.find(": ", pos)
            j = text.find(": ", i + 2) if i >= 0 else -1
            if j >= 0:
                end = text.find("\n", j)
                end = len(text) if end < 0 else end
                text = text[:i + 2] + "&x " + text[i + 2:j + 2] + "*x" + text[end:]
    return text


def check_loader(text: str):
    return bounded("loader", parse_recipe, text, mem_mib=LOADER_MEM_MIB)


decoded_bytes = st.tuples(st.binary(max_size=3000), st.sampled_from(["utf-8", "latin-1", "utf-16-le", "cp1252"])).map(
    lambda t: t[0].decode(t[1], errors="replace" if t[1] != "utf-8" else "surrogateescape"))
mutated_recipe = st.tuples(st.integers(0, 2**32), st.integers(1, 6)).map(
    lambda t: _mutate_text(random.Random(t[0]).choice(recipe_texts()), random.Random(t[0]), t[1]))


def _paths(obj, path=()):
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, path + (i,))


def _set(obj, path, value):
    for p in path[:-1]:
        obj = obj[p]
    obj[path[-1]] = value


@st.composite
def structured_recipe(draw):
    """A shipped recipe, edited as data (random subtrees replaced, keys added or deleted, expressions
    swapped), dumped back to YAML or JSON. Reaches the schema and semantic checks, not only the parser."""
    data = copy.deepcopy(draw(st.sampled_from(recipe_data())))
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(data) if p]
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "delete", "add", "expr"]))
        parent = data
        for p in path[:-1]:
            parent = parent[p]
        if action == "replace":
            _set(data, path, draw(json_values))
        elif action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["include", "extends", "when", "that", "map", "rule", "offset", "pairs",
                                         "otherwise", "x"]) | st.text(max_size=8))] = draw(json_values)
        else:
            _set(data, path, draw(expressions))
        if not isinstance(data, dict):
            break
    if draw(st.booleans()):
        return json.dumps(data, allow_nan=True, default=str)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=draw(st.booleans()))


TAGS = ["!!python/object/apply:os.system", "!!python/name:os.system", "!!python/module:os", "!include", "!!binary",
        "!!set", "!!omap", "!!pairs", "!!str", "!!int", "!!float", "!!bool", "!!null", "!!map", "!!seq", "!custom",
        "!<tag:yaml.org,2002:python/object:os.system>", "!!timestamp", "!", "!!merge", "!!value",
        "!!int", "!!float"]  # (int and float twice: the constructors that crashed, issue 34)
YAML_SCALARS = ["1", "-1", "0", "1e999", "-.inf", ".nan", "0x_", "0b_", "1" * 4400, "-" + "1" * 300, "1.5e300",
                "true", "yes", "~", "null", "''", '""', "'a''b'", '"\\u00e9\\t"', "2001-12-14", "1:30", "0o17",
                "x", "gemma4", "pp_size == 1", "pp_size.__class__ == 1", "share_kv", "kv_source", "error",
                "'_'", "'-'", "'.'", "'+'", '"0x"', "':'"]  # issue 34: empty / sign / underscore / dot after a tag


@st.composite
def yaml_features(draw):
    """YAML text built from the features that break loaders: anchors and aliases (defined or not),
    merge keys, tags, duplicate keys, long strings, deep flow and block nesting, billion laughs."""
    anchors: list[str] = []

    def value(depth: int) -> str:
        kind = draw(st.sampled_from(["scalar", "scalar", "flow_seq", "flow_map", "alias", "long", "tagged",
                                     "deep", "laughs"]) if depth < 4 else st.sampled_from(["scalar", "alias"]))
        prefix = ""
        if draw(st.integers(0, 5)) == 0:
            name = f"a{len(anchors)}"
            anchors.append(name)
            prefix = f"&{name} "
        if kind == "scalar":
            return prefix + draw(st.sampled_from(YAML_SCALARS) | st.text(
                alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20).map(json.dumps))
        if kind == "flow_seq":
            return prefix + "[" + ", ".join(value(depth + 1) for _ in range(draw(st.integers(0, 4)))) + "]"
        if kind == "flow_map":
            items = [f"{draw(st.sampled_from(['a', 'b', 'a', '<<', 'rule', '1', '? x']))}: {value(depth + 1)}"
                     for _ in range(draw(st.integers(0, 4)))]
            return prefix + "{" + ", ".join(items) + "}"
        if kind == "alias":
            return "*" + (draw(st.sampled_from(anchors)) if anchors and draw(st.booleans()) else "nope")
        if kind == "long":
            return prefix + '"' + draw(st.sampled_from(["x", "é", "\\n", "ab"])) * draw(st.integers(0, 200_000)) + '"'
        if kind == "tagged":
            return draw(st.sampled_from(TAGS)) + " " + value(depth + 1)
        if kind == "deep":
            n = draw(st.integers(1, 200))
            opener = draw(st.sampled_from(["[", "{a: "]))
            closer = "]" if opener == "[" else "}"
            return opener * n + "1" + closer * n
        # billion laughs: each level aliases the previous one k times
        k, levels = draw(st.integers(2, 10)), draw(st.integers(1, 12))
        base = f"l{len(anchors)}"
        parts = [f"&{base}0 [lol, lol]"]
        for i in range(1, levels):
            parts.append(f"&{base}{i} [" + ", ".join([f"*{base}{i - 1}"] * k) + "]")
        return "[" + ", ".join(parts) + "]"

    if draw(st.integers(0, 15)) == 0:  # wide rather than deep: up to ~600 KB of small nodes
        # (capped below the 1 MiB limit: a 1 MiB bracket-dense document costs ~0.35 s CPU in the flow
        # depth pre-scan, and under heavy machine load one such call crossed the 1 s bound)
        n = draw(st.integers(1000, 150_000))
        return draw(st.sampled_from(["a: [" + "1," * n + "]\n", "a: [" + "[1]," * n + "]\n",
                                     "".join(f"k{i}: {i}\n" for i in range(n // 3)), "- {}\n" * n]))
    keys = ["recipe", "version", "summary", "applies_to", "requires", "layer_maps", "ops", "engine", "layer_sets",
            "include", "extends", "<<", "recipe", "x"]
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        key = draw(st.sampled_from(keys))
        if draw(st.booleans()):
            lines.append(f"{key}: {value(0)}")
        else:  # block style, a few levels deep
            depth = draw(st.integers(1, 30))
            lines.append(key + ":")
            for d in range(1, depth):
                lines.append("  " * d + draw(st.sampled_from(["- ", "k: ", "<<: ", "? "])).rstrip() +
                             (":" if draw(st.booleans()) else ""))
            lines.append("  " * depth + value(1))
    return "\n".join(lines) + "\n"


LOADER_STRATEGIES = {
    "loader_bytes": decoded_bytes,
    "loader_unicode": st.text(max_size=400),
    "loader_mutated": mutated_recipe,
    "loader_structured": structured_recipe(),
    "loader_yaml_features": yaml_features(),
}


# -- 2. expressions --------------------------------------------------------------------------------

TOKENS = ["(", ")", "[", "]", ",", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "//", "%", "and", "or", "not",
          "in", "not in", "true", "false", "null", "None", "True", "1", "0", "-1", "1.5", "0.0", "9" * 40,
          "9" * 400 + ".0", "'fp8'", '"x"', "''", "'", '"', "pp_size", "tp_size", "draft.hidden_size",
          "target.num_kv_heads", "draft.layer_type_set", "__import__", "os.system", "x.__class__", "lambda", ":",
          "=", ".", "@", "`", "\\", "é", "\x00", "\n", "{", "}", ";", "1e5", "0x10", "**", "/", "is", "if", "else"]
NAMES = list(RUNTIME_NAMES) + [f"{s}.{f}" for s in ("draft", "target") for f in FACT_NAMES] + ["x", "draft.nope"]
token_soup = st.lists(st.tuples(st.sampled_from(TOKENS), st.sampled_from(["", " ", "  ", "\t"])),
                      max_size=60).map(lambda ts: "".join(t + s for t, s in ts))

_atoms = st.one_of(
    st.integers(-10**6, 10**6).map(str), st.sampled_from(["0", "1", "2", "9" * 50, "9" * 350 + ".5", "0.5", "1.0"]),
    st.sampled_from(["true", "false", "null", "None", "'fp8'", "'auto'", "'vllm'", "''", "'sliding_attention'"]),
    st.sampled_from(NAMES),
)
_BINOPS = ["and", "or", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "+", "-", "*", "//", "%"]
expressions = st.recursive(
    _atoms,
    lambda c: st.one_of(
        c.map(lambda e: f"({e})"),
        st.tuples(st.sampled_from(["not ", "-"]), c).map("".join),
        st.tuples(c, st.sampled_from(_BINOPS), c).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.lists(c, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
    ),
    max_leaves=40,
)


@st.composite
def deep_expression(draw):
    """One nesting construct repeated n times: parses iff n <= MAX_DEPTH."""
    n = draw(st.integers(1, 3 * expr_lang.MAX_DEPTH))
    opener, closer = draw(st.sampled_from([("(", ")"), ("not ", ""), ("-", ""), ("[", "]")]))
    core = draw(st.sampled_from(["1", "true", "pp_size", "[]"]))
    return n + (core == "[]"), opener * n + core + closer * n  # `[]` is one more level


env_values = st.lists(json_values, min_size=1, max_size=8)


def _lookup(values):
    return lambda name: values[zlib.crc32(name.encode()) % len(values)]


def check_expr(text: str, values: list):
    parsed = bounded("expr", expr_lang.parse, text, allowed=(expr_lang.ExprError,))
    if isinstance(parsed, expr_lang.Expr):
        parsed.names  # walks the tree
        result = bounded("expr", parsed.evaluate, _lookup(values), allowed=(expr_lang.ExprError,))
        if not isinstance(result, expr_lang.ExprError):
            assert result is None or isinstance(result, (bool, int, float, str, list, dict)), result
    return parsed


# -- 3. config reader ------------------------------------------------------------------------------

CONFIG_FIELDS = [
    "model_type", "text_config", "hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "sliding_window", "layer_types", "num_kv_shared_layers", "architectures",
    "draft_vocab_size", "num_nextn_predict_layers", "backbone_hidden_size", "tie_word_embeddings", "rope_theta",
    "rope_parameters", "global_head_dim", "max_position_embeddings", "hidden_size_per_layer_input",
    "use_ordered_embeddings", "target_hidden_size", "eagle_aux_hidden_state_layer_ids", "eagle_config",
    "num_aux_hidden_states", "index_topk", "bos_token_id", "eos_token_id", "pad_token_id", "num_centroids",
    "rope_scaling", "per_layer_config", "sliding_window_pattern", "attention_k_eq_v", "num_global_key_value_heads",
    "_comment", "_name_or_path",
    # MTP family fields (issue 18: facts `num_mtp_layers` & co, data in config_defaults.yaml)
    "mtp_num_hidden_layers", "num_mtp_modules", "mtp_config", "num_layers", "layers_block_type",
    "mtp_hybrid_override_pattern", "mtp_layer_types", "hc_count",
]
plausible = st.one_of(
    st.integers(-3, 70), st.sampled_from(HUGE_INTS),
    st.lists(st.sampled_from(["sliding_attention", "full_attention", "", "chunked_attention", 1, None]), max_size=40),
    st.dictionaries(st.sampled_from(["0", "1", "2", "-1", "99", "x", "1e3", " 1", "١"]),
                    st.dictionaries(st.sampled_from(["head_dim", "num_key_value_heads"]), scalars, max_size=2),
                    max_size=3),
    st.dictionaries(st.sampled_from(["rope_theta", "full_attention", "type", "rope_type", "eagle_aux_hidden_state_layer_ids"]),
                    json_values, max_size=3),
    st.sampled_from(["gemma4", "gemma4_text", "gemma4_assistant", "llama", "deepseek_v3", "qwen3_next", "eagle",
                     "glm4_moe", "mimo", "longcat_flash", "nemotron_h", "inkling_model", "qwen3_5_text",
                     "dots3_note", "mimo_v2_flash", "minimax_m3_vl_text"]),
)


@st.composite
def config_text(draw):
    cfg = copy.deepcopy(draw(st.sampled_from(config_dicts())))
    for _ in range(draw(st.integers(0, 8))):
        level = cfg
        if isinstance(cfg.get("text_config"), dict) and draw(st.booleans()):
            level = cfg["text_config"]
        key = draw(st.sampled_from(CONFIG_FIELDS))
        if draw(st.integers(0, 4)) == 0:
            level.pop(key, None)
        else:
            level[key] = draw(plausible | json_values)
    if draw(st.integers(0, 9)) == 0:  # deep nesting somewhere
        n = draw(st.integers(50, 3000))
        cfg["junk"] = json.loads("[" * n + "]" * n) if n < 900 else None
        text = json.dumps(cfg, allow_nan=True, default=str)
        if n >= 900:
            text = text.replace('"junk": null', '"junk": ' + "[" * n + "]" * n)
        return text
    text = json.dumps(cfg, allow_nan=True, default=str, ensure_ascii=draw(st.booleans()))
    if draw(st.integers(0, 3)) == 0:
        text = _mutate_json(text, random.Random(draw(st.integers(0, 2**32))))
    return text


def _mutate_json(text: str, rnd: random.Random) -> str:
    pos = rnd.randrange(len(text) + 1)
    return rnd.choice([
        lambda: text[:pos] + text[pos + rnd.randrange(1, 20):],
        lambda: text[:pos] + rnd.choice(['"', "{", "[", ",", "NaN", "-Infinity", "1e999", "9" * 5000, "\ud800",
                                         '"\\ud800"', "\x00", "null", ":"]) + text[pos:],
        lambda: text.replace("{", '{"model_type": "x", ', 1),  # duplicate key
        lambda: text.replace('"hidden_size": ', '"hidden_size": 1e400, "x": ', 1),
    ])()


def check_config(text: str):
    cfg = bounded("config", parse_config_text, text)
    if isinstance(cfg, dict):
        facts = bounded("config", facts_from_config, cfg)
        if not isinstance(facts, SurgeryError):
            assert facts.num_layers == facts["num_hidden_layers"] >= 1
            for layer in facts.layers:
                assert layer.head_dim >= 1 and layer.num_kv_heads >= 1
    return cfg


# -- 4. resolver -----------------------------------------------------------------------------------

sizes = st.one_of(st.integers(1, 4), st.integers(1, 4), st.integers(-2, 9),
                  st.sampled_from([0, 16, 61, 4096, 4097, 2**40, True, False, "2", 1.0, None]))
runtimes = st.builds(
    Runtime,
    engine=st.sampled_from(["vllm", "hf", "sglang", "", "VLLM"]) | st.text(max_size=8),
    pp_size=sizes, tp_size=sizes,
    kv_cache_dtype=st.sampled_from(["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", ""]) | st.text(max_size=8),
    attention_backend=st.sampled_from([None, "TRITON_ATTN", "FLASH_ATTN", "FLEX_ATTENTION", "CPU_ATTN", "x"]),
    pp_rank=st.none() | st.integers(-1, 8), tp_rank=st.none() | st.integers(-1, 8),
    draft_tp_size=st.none() | st.integers(-1, 9), device=st.sampled_from([None, "cuda", "cpu", "xpu", ""]),
)


@st.composite
def resolver_case(draw):
    recipe = draw(st.sampled_from(parsed_recipes()))
    if draw(st.integers(0, 3)) == 0:  # a shipped recipe with one condition replaced
        text = draw(st.sampled_from(recipe_texts()))
        for key in ("when: ", "that: "):
            if key in text and draw(st.booleans()):
                i = text.index(key) + len(key)
                j = text.index("\n", i)
                text = text[:i] + json.dumps(draw(expressions)) + text[j:]
        try:
            recipe = parse_recipe(text)
        except SurgeryError:
            pass
    if draw(st.booleans()):  # the recipe's own pair, lightly edited: reaches the deep checks
        target, draft = PAIR_FOR.get(recipe.name, ("gemma-4-E2B-it.json", "gemma-4-E2B-it-assistant.json"))
        return recipe, draw(light_config(draft)), draw(light_config(target)), draw(runtimes)
    return recipe, draw(config_text()), draw(config_text()), draw(runtimes)


PAIR_FOR = {  # recipe -> (target, draft) configs it is written for
    "gemma4-mtp": ("gemma-4-E2B-it.json", "gemma-4-E2B-it-assistant.json"),
    "eagle3": ("Llama-3.1-8B-Instruct.json", "EAGLE3-LLaMA3.1-Instruct-8B.json"),
    "eagle": ("Llama-3.1-8B-Instruct.json", "EAGLE-LLaMA3.1-Instruct-8B.json"),
    "deepseek-mtp": ("DeepSeek-V3.json", "DeepSeek-V3.json"),
    "mtp": ("Qwen3-Next-80B-A3B-Instruct.json", "Qwen3-Next-80B-A3B-Instruct.json"),
    "draft-model": ("Llama-3.1-8B-Instruct.json", "Llama-3.2-1B-Instruct.json"),
}


@st.composite
def light_config(draw, name: str):
    cfg = copy.deepcopy(json.loads((CONFIGS / name).read_text(encoding="utf-8")))
    for _ in range(draw(st.integers(0, 2))):
        level = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) and draw(st.booleans()) else cfg
        level[draw(st.sampled_from(CONFIG_FIELDS))] = draw(st.integers(0, 70) | st.sampled_from(HUGE_INTS) | plausible)
    return json.dumps(cfg, allow_nan=True, default=str)


def check_resolver(recipe, draft_text: str, target_text: str, runtime: Runtime):
    facts = []
    for text in (draft_text, target_text):
        cfg = bounded("resolver_facts", parse_config_text, text)
        if isinstance(cfg, SurgeryError):
            return None
        f = bounded("resolver_facts", facts_from_config, cfg)
        if isinstance(f, SurgeryError):
            return None
        facts.append(f)
    plan = bounded("resolver", resolve, recipe, facts[0], facts[1], runtime)
    if not isinstance(plan, SurgeryError):
        data = json.loads(plan.to_json())
        assert data["ok"] == plan.ok and isinstance(data["diagnostics"], list)
        plan.render() if hasattr(plan, "render") else None
    return plan


# -- the tests -------------------------------------------------------------------------------------

TARGETS = {
    **{name: (strategy, check_loader) for name, strategy in LOADER_STRATEGIES.items()},
    "expr_token_soup": (st.tuples(token_soup, env_values), lambda t: check_expr(*t)),
    "expr_wellformed": (st.tuples(expressions, env_values), lambda t: check_expr(*t)),
    "config": (config_text(), check_config),
    "resolver": (resolver_case(), lambda t: check_resolver(*t)),
}


# Inputs that once failed a target, run first on every run of it (short, long and bench/fuzz_long.py)
# before anything is generated: hypothesis' example database is local and off in the long runs.
FLAT_MAPPING = "".join(f"k{i}: {i}\n" for i in range(4000))  # 1.008 s CPU against the 1 s bound (issue 34)
LOADER_REGRESSIONS = [
    "recipe: !!int &a1 ''\n",  # IndexError out of construct_yaml_int (test_fuzz_long[loader_yaml_features])
    *(f"{other}\n{key}: {literal}\n" for key, other in (("version", "recipe: x"), ("recipe", "version: 1"))
      for literal in ('!!int ""', '!!float ""', '!!int "_"', '!!float "."', '!!int "-"')),
    FLAT_MAPPING,
]
REGRESSIONS: dict[str, list] = {name: LOADER_REGRESSIONS for name in LOADER_STRATEGIES}


def run_target(name: str, max_examples: int, **overrides) -> None:
    strategy, check = TARGETS[name]
    opts = dict(max_examples=max_examples, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much, HealthCheck.large_base_example])
    opts.update(overrides)

    def prop(case):
        EXAMPLES[name] += 1
        check(case)

    prop = given(strategy)(prop)
    for case in REGRESSIONS.get(name, ()):
        prop = example(case)(prop)
    settings(**opts)(prop)()


@pytest.fixture(scope="module", autouse=True)
def _warm():
    parsed_recipes(), config_dicts(), catalogue()  # first-call costs are not per-input costs


@pytest.mark.parametrize("target", list(TARGETS))
def test_fuzz_short(target):
    run_target(target, CI_EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("target", list(TARGETS))
def test_fuzz_long(target):
    run_target(target, LONG_EXAMPLES)


# -- properties with a precise expected answer ---------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(deep_expression())
def test_expression_depth_limit_is_exact(case):
    n, text = case
    result = bounded("expr_depth", expr_lang.parse, text, allowed=(expr_lang.ExprError,))
    if n <= expr_lang.MAX_DEPTH:
        assert isinstance(result, expr_lang.Expr), (n, text, result)
    else:
        assert isinstance(result, expr_lang.ExprError) and result.code == "SRG113", (n, result)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(range(len(HOSTILE_SNIPPETS))), st.sampled_from(["recipe", "summary", "version"]))
def test_every_hostile_snippet_as_a_value(i, key):
    text = recipe_texts()[0]
    line = next(ln for ln in text.splitlines() if ln.startswith(key + ":"))
    check_loader(text.replace(line, f"{key}: {HOSTILE_SNIPPETS[i]}", 1))


@pytest.mark.parametrize("text", ["version: 1" + "0" * 400, "version: -1" + "0" * 400])
def test_huge_int_above_schema_maximum_is_coded(text):
    """Found by the long campaign: the schema message formatted the value with `:.3g` (float
    conversion), OverflowError for ints beyond 1e308."""
    with pytest.raises(SurgeryError) as ei:
        parse_recipe(recipe_texts()[0].replace("version: 1", text, 1))
    assert ei.value.diagnostics[0].code == "SRG105" and "e+400" in ei.value.diagnostics[0].message


@pytest.mark.parametrize("value", [10**400, -10**400])
def test_huge_int_config_field_is_coded(value):
    """Found by the long campaign: same `:.3g` OverflowError in the config reader's bounds message."""
    cfg = {"model_type": "llama", "hidden_size": value, "vocab_size": 10, "num_hidden_layers": 2,
           "num_attention_heads": 2}
    with pytest.raises(SurgeryError) as ei:
        facts_from_config(parse_config_text(json.dumps(cfg)))
    assert ei.value.diagnostics[0].code == "SRG205"


@pytest.mark.parametrize("literal", ["0x_", "0b_", "1" * 4400, "-" + "2" * 5000, "!!bool gemma4", "!!bool 2",
                                     "!!int x", "!!float x", "!!int 1.5"])
def test_unconstructible_yaml_ints_are_coded(literal):
    """Found by this file: PyYAML's constructors raised ValueError (`0x_`, 4300+ digits) or KeyError
    (`!!bool gemma4`, found by the long campaign) on these (bug fixed in yamlload)."""
    text = recipe_texts()[0].replace("version: 1", f"version: {literal}", 1)
    with pytest.raises(SurgeryError) as ei:
        parse_recipe(text)
    assert ei.value.diagnostics[0].code == "SRG102"


@pytest.mark.parametrize("text", ["1" + "0" * 400 + " // 1.5", "1" + "0" * 400 + " + 1.5", "1.5 - " + "9" * 400,
                                  "-" + "9" * 400 + " % 2.5"])
def test_huge_int_meets_float_is_coded(text):
    """Found by this file: OverflowError (int too large to convert to float) escaped `_eval`."""
    with pytest.raises(expr_lang.ExprError) as ei:
        expr_lang.parse(text).evaluate(lambda name: None)
    assert ei.value.code == "SRG112"


@pytest.mark.parametrize("text", ["a: [" + "1," * 450_000 + "]\n", "a: [" + "[1]," * 200_000 + "]\n",
                                  "- {}\n" * 200_000])
def test_wide_document_refused_before_composing(text):
    """Found by this file: a < 1 MiB document of 450k tiny nodes was composed in full (2-5 s, ~130 MiB)
    before the builder's node limit fired; now the event stream is counted first. Bounded by the
    function calls it takes (composing in full took 2-5 s, several million calls), not by seconds."""
    result, calls, _ = counted(parse_recipe, text, allowed=(SurgeryError,))
    assert isinstance(result, SurgeryError) and result.diagnostics[0].code == "SRG008"
    assert calls < CALL_LIMIT, f"{calls} function calls (limit {CALL_LIMIT})"


@pytest.mark.parametrize("depth", [200, 600, 950])
def test_deep_config_object_is_coded(depth):
    """Found by this file: a config nested a few hundred objects deep parsed as JSON, then
    `_strip_annotations` hit RecursionError (facts_from_config now refuses > 100 levels)."""
    cfg = {"model_type": "llama", "hidden_size": 64, "vocab_size": 10, "num_hidden_layers": 2,
           "num_attention_heads": 2}
    text = json.dumps(cfg)[:-1] + ', "junk": ' + '{"a": ' * depth + "1" + "}" * depth + "}"
    with pytest.raises(SurgeryError) as ei:
        facts_from_config(parse_config_text(text))
    assert ei.value.diagnostics[0].code == "SRG009"


@pytest.mark.parametrize("case", LOADER_REGRESSIONS[:-1])
def test_tagged_scalars_that_crashed_are_coded(case):
    """Found by the long campaign (issue 34): PyYAML's int/float constructors index or convert the
    text unchecked; the loader let IndexError out. tests/test_yamlload_tags.py runs the whole grid."""
    result = check_loader(case)
    assert isinstance(result, SurgeryError) and result.diagnostics[0].code == "SRG102", result
    assert result.diagnostics[0].location.line is not None and result.diagnostics[0].location.col is not None


def test_flat_mapping_of_thousands_of_unknown_keys_has_headroom(monkeypatch):
    """Found by the long campaign (issue 34): 4000 unknown top-level keys took 1.008 s CPU, most of it
    difflib's "did you mean" per key. Now capped (schemacheck.MAX_SUGGESTIONS); every key is still
    reported. The cap is checked by counting the look-ups (a CPU-time bound of half the fuzz limit
    flaked on a loaded machine: 0.77 s once, 2026-12-04), and the whole parse by counting its
    function calls against the fuzz per-input CALL_LIMIT (the full CPU-time bound failed a fresh
    clone's run on a loaded machine, 1.168 s against 1 s: issue 48). Timings: bench/fuzz_long.py."""
    from surgery.text import schemacheck

    lookups = []
    closest = schemacheck._closest
    monkeypatch.setattr(schemacheck, "_closest", lambda *a, **k: lookups.append(a) or closest(*a, **k))
    result, calls, _ = counted(parse_recipe, FLAT_MAPPING, allowed=(SurgeryError,))
    assert isinstance(result, SurgeryError)
    assert len([d for d in result.diagnostics if d.code == "SRG101"]) == 4000
    assert len(lookups) == schemacheck.MAX_SUGGESTIONS
    assert calls < CALL_LIMIT, f"{calls} function calls (limit {CALL_LIMIT})"
    # the cap: close misspellings past the first MAX_SUGGESTIONS keep the allowed-keys hint only
    n = schemacheck.MAX_SUGGESTIONS + 5
    with pytest.raises(SurgeryError) as ei:
        parse_recipe("recipe: x\n" + "".join(f"versio{i}: 1\n" for i in range(n)))
    hints = [d.hint for d in ei.value.diagnostics if d.code == "SRG101"]
    assert len(hints) == n and all("allowed keys: " in h and " version" in h for h in hints), hints
    assert [("did you mean 'version'?" in h) for h in hints] == [True] * (n - 5) + [False] * 5, hints


def test_lone_surrogate_is_coded():
    """Found by this file: libyaml raised UnicodeEncodeError on a str holding a lone surrogate."""
    with pytest.raises(SurgeryError) as ei:
        parse_recipe("recipe: x\nsummary: '\udc80'\n")
    assert ei.value.diagnostics[0].code == "SRG002"


def test_nan_and_inf_never_reach_a_recipe():
    for lit in (".nan", ".NaN", ".inf", "-.Inf", "1e999", "-1e999"):
        text = recipe_texts()[0].replace("version: 1", f"version: {lit}", 1)
        with pytest.raises(SurgeryError) as ei:
            parse_recipe(text)
        assert ei.value.diagnostics[0].code == "SRG102", lit
    assert math.isinf(float("1e999"))


def test_long_campaign_script_runs_one_short_round(tmp_path):
    """bench/fuzz_long.py runs only by hand, so nothing noticed when it broke; CI runs one short round
    of every target through it (issue 34), regression examples first. With `--time-limit 0`: the
    script times every call and would fail a slow one, a timed assertion this suite does not make
    (issue 48); the round still checks the script runs and counts."""
    import subprocess
    import sys

    out = tmp_path / "fuzz_long.json"
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz_long.py"), "--examples", "1", "--chunk", "10",
                          "--time-limit", "0", "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["rounds"] == 1 and data["failures"] == [] and data["time_limit_s"] == 0
    assert all(w["max_calls"] == 0 for w in data["worst_per_surface"].values())  # timed there, not counted
    assert set(data["inputs_per_target"]) == set(TARGETS)
    for name, n in data["inputs_per_target"].items():
        assert n >= 10 + len(REGRESSIONS.get(name, ())), (name, n)  # the regression examples ran too


def test_long_campaign_fails_a_surface_over_its_time_limit():
    """The CPU-time bound lives in the bench (issue 48): bench/fuzz_long.py turns a surface whose
    slowest input took longer than --time-limit into a failure naming that input; 0 only reports.
    Checked on recorded figures, nothing timed here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fuzz_long", ROOT / "bench" / "fuzz_long.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    worst = {"loader": {"max_s": 1.168, "slowest_input": "'k0: 0\\nk1: 1'"}, "expr": {"max_s": 0.0007}}
    (f,) = bench.over_time_limit(worst, 1.0)
    assert f["target"] == "loader" and "1.168 s CPU (limit 1.0 s)" in f["error"] and "k0: 0" in f["error"]
    assert bench.over_time_limit(worst, 0) == [] and bench.over_time_limit(worst, 2.0) == []
