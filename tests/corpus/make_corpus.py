"""Regenerate the broken-input corpus: `python tests/corpus/make_corpus.py`.

Writes recipes/*.yaml, configs/*.json and cases.yaml next to this file. Every case is a small
edit of a known-good base (`recipes/base.yaml`, the shipped gemma4-mtp recipe without comments;
`configs/gemma-4-E2B-it*.json`, verbatim copies of ../shared/configs/gemma4/). Expected locations
are computed from the edited text (the line holding a marker, the column of a token), so they
stay right when the base changes. The expectations (code, exit, location) are what the
diagnostic catalogue (surgery/data/codes.yaml) says, not what the current code happens to print.

Only the 2 MB recipe is not stored: tests/test_broken_inputs.py creates it (`generate: big_2mb`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
REC = HERE / "recipes"
CFG = HERE / "configs"
TARGET = "configs/gemma-4-E2B-it.json"
DRAFT = "configs/gemma-4-E2B-it-assistant.json"

BASE = """\
# corpus base: the shipped gemma4-mtp recipe, comments removed
recipe: corpus-case
version: 1
summary: Gemma 4 MTP assistant reads the target's KV cache, KV scales and input embeddings.
applies_to:
  target: {model_type: [gemma4, gemma4_text]}
  draft: {model_type: [gemma4_assistant]}
requires:
  - that: draft.backbone_hidden_size == target.hidden_size
    because: the assistant's pre_projection consumes the target's embedding and hidden state
    code: SRG314
  - that: draft.num_kv_shared_layers == draft.num_hidden_layers
    because: a Gemma 4 assistant has no k/v projections
    code: SRG308
  - that: draft.vocab_size == target.vocab_size
    because: the draft proposes token ids of the target's vocabulary
    code: SRG313
layer_maps:
  kv_source:
    rule: last_unshared_of_type
    must_match: [head_dim, num_kv_heads, sliding_window, layer_type]
ops:
  - share_kv: {map: kv_source}
  - copy_attrs:
      map: kv_source
      rules:
        - {attrs: [_k_scale, _v_scale], mode: clone_keep_registration}
        - {attrs: [_k_scale_float, _v_scale_float], mode: assign}
        - {attrs: [_k_scale_cpu, _v_scale_cpu], mode: copy_inplace}
      when: engine == 'vllm'
      otherwise: skip
      because: HF attention layers hold no KV-cache quantisation scales
  - share_module:
      role: input_embeddings
      from: target
      when: pp_size == 1
      otherwise: error
      because: the target's input embedding lives on the first pipeline stage
  - keep: {role: lm_head, tied_to: draft_embeddings}
engine:
  vllm: {attention_backend: inherit_target, advance_draft_positions: false}
  hf: {advance_draft_positions: false}
"""

EXPLICIT = """\
    rule: explicit
    pairs:
{pairs}
    must_match: [head_dim, num_kv_heads, sliding_window, layer_type]
"""
KV_MAP = """\
    rule: last_unshared_of_type
    must_match: [head_dim, num_kv_heads, sliding_window, layer_type]
"""

cases: list[dict] = []


def replace(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, (old, text.count(old))
    return text.replace(old, new)


def line_of(text: str, marker: str, nth: int = 0) -> int:
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if marker in line]
    assert len(hits) > nth, (marker, hits)
    return hits[nth]


def col_of(text: str, marker: str, token: str, nth: int = 0) -> int:
    """1-based column of `token` on the (first) line holding `marker`."""
    line = text.splitlines()[line_of(text, marker) - 1]
    pos = -1
    for _ in range(nth + 1):
        pos = line.index(token, pos + 1)
    return pos + 1


def recipe_case(cid: str, text: str | bytes, code: str, exit: int, *, line_marker: str | None = None,
                line: int | None = None, col: int | None = None, key: str | None = None, doc: str = "",
                target: str = TARGET, draft: str = DRAFT, args: list[str] | None = None, **extra) -> None:
    name = f"{cid}.yaml"
    path = REC / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
        if line_marker is not None:
            line = line_of(text, line_marker)
    loc = {"file": name}
    if line is not None:
        loc["line"] = line
    if col is not None:
        loc["col"] = col
    if key is not None:
        loc["key"] = key
    add(cid, f"recipes/{name}", target, draft, code, exit, loc, doc, args, **extra)


def add(cid, recipe, target, draft, code, exit, location, doc, args=None, **extra) -> None:
    case = {"id": cid, "doc": doc, "recipe": recipe, "target": target, "draft": draft, "args": args or [],
            "code": code, "exit": exit, "location": location}
    case.update(extra)
    cases.append(case)


def config_variant(name: str, base: str, edit) -> str:
    data = json.loads((HERE / base).read_text(encoding="utf-8"))
    edit(data)
    (CFG / name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return f"configs/{name}"


def text_edit(**changes):
    def edit(cfg):
        cfg["text_config"].update(changes)
    return edit


def explicit(pairs: dict) -> str:
    body = "\n".join(f"      {k}: {v}" for k, v in pairs.items())
    return replace(BASE, KV_MAP, EXPLICIT.format(pairs=body))


def when(expr: str) -> str:
    return replace(BASE, "      when: pp_size == 1\n", f"      when: {expr}\n")


def build() -> None:
    REC.mkdir(exist_ok=True)
    CFG.mkdir(exist_ok=True)
    for old in REC.glob("*.yaml"):
        old.unlink()
    (REC / "base.yaml").write_text(BASE, encoding="utf-8")

    # ------------------------------------------------------------------ YAML syntax & structure
    t = replace(BASE, "  target: {model_type: [gemma4, gemma4_text]}", "  target: {model_type: [gemma4, gemma4_text}")
    recipe_case("yaml-syntax-unclosed-flow", t, "SRG004", 2, line_marker="gemma4_text}",
                col=col_of(t, "gemma4_text}", "}"), doc="`]` missing in a flow sequence")
    t = replace(BASE, "    rule: last_unshared_of_type", "\trule: last_unshared_of_type")
    recipe_case("yaml-syntax-tab-indent", t, "SRG004", 2, line_marker="\trule:", doc="tab used for indentation")
    t = BASE + "descripton: typo of description\n"
    recipe_case("unknown-top-level-key", t, "SRG101", 1, line_marker="descripton:", key="descripton")
    t = replace(BASE, "    must_match: [head_dim, num_kv_heads, sliding_window, layer_type]",
                "    must_match: [head_dim, num_kv_heads, sliding_window, layer_type]\n    must_mach: [head_dim]")
    recipe_case("unknown-nested-key", t, "SRG101", 1, line_marker="must_mach:", key="layer_maps.kv_source.must_mach")
    t = replace(BASE, "[head_dim, num_kv_heads, sliding", "[head_dim, num_kv_head, sliding")
    recipe_case("must-match-value-typo", t, "SRG104", 1, line_marker="num_kv_head,",
                col=col_of(t, "num_kv_head,", "num_kv_head"), key="layer_maps.kv_source.must_match[1]")
    t = replace(BASE, "  - share_kv: {map: kv_source}", "  - shared_kv: {map: kv_source}")
    recipe_case("op-name-typo", t, "SRG101", 1, line_marker="shared_kv", key="ops[0].shared_kv")
    t = replace(BASE, "    must_match: [head_dim, num_kv_heads, sliding_window, layer_type]", "    must_match: head_dim")
    recipe_case("wrong-type-string-for-list", t, "SRG102", 1, line_marker="must_match:", key="layer_maps.kv_source.must_match")
    t = replace(BASE, "applies_to:\n  target: {model_type: [gemma4, gemma4_text]}\n  draft: {model_type: [gemma4_assistant]}",
                "applies_to: [gemma4, gemma4_assistant]")
    recipe_case("wrong-type-list-for-mapping", t, "SRG102", 1, line_marker="applies_to:", key="applies_to")
    t = replace(BASE, "version: 1\n", "version: true\n")
    recipe_case("wrong-type-bool-for-int", t, "SRG102", 1, line_marker="version:", key="version")
    t = replace(BASE, "  - keep: {role: lm_head, tied_to: draft_embeddings}", "  - keep: lm_head")
    recipe_case("wrong-type-string-for-op-args", t, "SRG102", 1, line_marker="keep: lm_head", key="ops[3].keep")
    t = replace(BASE, "summary: Gemma 4 MTP assistant reads the target's KV cache, KV scales and input embeddings.\n", "")
    recipe_case("missing-summary", t, "SRG103", 1, line=2, doc="location: the root mapping (line of its first key)")
    t = BASE[: BASE.index("ops:")] + BASE[BASE.index("engine:"):]
    recipe_case("missing-ops", t, "SRG103", 1, line=2)
    t = replace(BASE, "    rule: last_unshared_of_type\n", "")
    recipe_case("map-missing-rule", t, "SRG103", 1, line_marker="must_match:", key="layer_maps.kv_source",
                doc="the map's mapping starts at its first remaining key")
    t = replace(BASE, "rule: last_unshared_of_type", "rule: last_unshared_of_kind")
    recipe_case("unknown-rule", t, "SRG104", 1, line_marker="rule:", key="layer_maps.kv_source.rule")
    t = replace(BASE, "rule: last_unshared_of_type", "rule: explicit")
    recipe_case("explicit-without-pairs", t, "SRG103", 1, line_marker="rule: explicit", key="layer_maps.kv_source")
    t = explicit({0: 13, 1: 13, 2: 13, 3: 14, 4: 13})
    recipe_case("explicit-draft-layer-out-of-range", t, "SRG309", 1, line_marker="4: 13", key="layer_maps.kv_source.pairs.4")
    t = explicit({0: 13, 1: 13, 2: 13, 3: 35})
    recipe_case("explicit-target-layer-out-of-range", t, "SRG309", 1, line_marker="3: 35", key="layer_maps.kv_source.pairs.3")
    t = explicit({0: 13, 1: 13, 3: 14})
    recipe_case("explicit-draft-layer-unmapped", t, "SRG315", 1, line_marker="rule: explicit", key="layer_maps.kv_source")
    t = explicit({0: 18, 1: 13, 2: 13, 3: 14})
    recipe_case("explicit-target-in-kv-shared-tail", t, "SRG307", 1, line_marker="rule: explicit", key="layer_maps.kv_source",
                doc="target layer 18 is a sliding layer inside E2B's KV-shared tail (15..34)")
    t = explicit({"first": 13, 1: 13, 2: 13, 3: 14})
    recipe_case("explicit-non-index-key", t, "SRG122", 1, line_marker="first: 13",
                doc="catalogue: SRG122 = an explicit map has keys that are not draft layer indices")
    t = replace(BASE, "  - share_kv: {map: kv_source}", "  - share_kv: {map: kv_sources}")
    recipe_case("op-unknown-map", t, "SRG120", 1, line_marker="kv_sources", key="ops[0].share_kv.map")
    t = replace(BASE, "      role: input_embeddings", "      role: input_embedding")
    recipe_case("unknown-role", t, "SRG104", 1, line_marker="role: input_embedding", key="ops[2].share_module.role",
                doc="the schema's role enum catches it (SRG121 is the apply-time code for a role without module paths)")
    t = replace(BASE, "mode: assign}", "mode: asign}")
    recipe_case("bad-copy-mode", t, "SRG104", 1, line_marker="asign", key="ops[1].copy_attrs.rules[1].mode")
    t = replace(BASE, "  - keep: {role: lm_head, tied_to: draft_embeddings}",
                "  - keep: {role: lm_head, tied_to: draft_embeddings, otherwise: error}")
    recipe_case("otherwise-without-when", t, "SRG107", 1, line_marker="otherwise: error}", key="ops[3].keep.otherwise")
    t = replace(BASE, "version: 1\n", "version: 2\n")
    recipe_case("recipe-version-2", t, "SRG123", 1, line_marker="version: 2", key="version")

    # ------------------------------------------------------------------ expressions
    def expr_case(cid, expr, code, token, nth=0, **kw):
        t = when(expr)
        line = t.splitlines().index("      when: " + expr) + 1  # the share_module `when`, not copy_attrs' one
        col = t.splitlines()[line - 1].index(token) + 1 if token is not None else None
        if token is not None and nth:
            col = col_of(t, "      when: " + expr, token, nth)
        recipe_case(cid, t, code, 1, line=line, col=col, key="ops[2].share_module.when", **kw)

    expr_case("expr-syntax-double-operator", "pp_size == == 1", "SRG110", "==", nth=1)
    expr_case("expr-syntax-unclosed-paren", "(pp_size == 1", "SRG110", None)
    expr_case("expr-syntax-bad-character", "pp_size == 1 && tp_size == 1", "SRG110", "&")
    expr_case("expr-syntax-unterminated-string", "engine == 'vllm", "SRG110", "'")
    expr_case("expr-syntax-missing-operator", "pp_size 1", "SRG110", "1")
    expr_case("expr-syntax-unclosed-list", "pp_size in [1, 2", "SRG110", None)
    t = when('"pp_size == == 1"')
    recipe_case("expr-syntax-in-quoted-scalar", t, "SRG110", 1, line_marker="pp_size == == 1",
                col=col_of(t, "pp_size == == 1", "==", 1), key="ops[2].share_module.when",
                doc="a quoted scalar: the column must point at the second `==`, past the opening quote")
    expr_case("expr-unknown-runtime-name", "pp_sise == 1", "SRG111", "pp_sise")
    t = replace(BASE, "that: draft.backbone_hidden_size == target.hidden_size",
                "that: draft.backbone_hidden_sise == target.hidden_size")
    recipe_case("expr-unknown-model-fact", t, "SRG111", 1, line_marker="backbone_hidden_sise",
                col=col_of(t, "backbone_hidden_sise", "draft."), key="requires[0].that")
    t = replace(BASE, "that: draft.vocab_size == target.vocab_size", "that: draft.vocab_size == targets.vocab_size")
    recipe_case("expr-unknown-side", t, "SRG111", 1, line_marker="targets.vocab_size",
                col=col_of(t, "targets.vocab_size", "targets."), key="requires[2].that")
    expr_case("expr-type-string-lt-number", "kv_cache_dtype < 8", "SRG112", None)
    expr_case("expr-type-and-on-ints", "pp_size and tp_size", "SRG112", None)
    long_expr = " and ".join(["pp_size == 1"] * 80)  # 1356 characters
    expr_case("expr-too-long", long_expr, "SRG113", None,
              doc="catalogue: SRG113 = longer than 1000 characters (the schema's maxLength reports SRG106 first)")
    expr_case("expr-too-deep-parens", "(" * 40 + "pp_size == 1" + ")" * 40, "SRG113", None)
    expr_case("expr-too-deep-not", "not " * 40 + "pp_size == 1", "SRG113", None)

    # ------------------------------------------------------------------ YAML safety & limits
    lol = ['summary: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    bomb = "recipe: bomb\nversion: 1\nlaughs:\n"
    prev = "a"
    for i in range(2, 10):
        name = chr(ord("a") + i - 1)
        lol.append(f"  {name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
        prev = name
    bomb += "\n".join(lol).replace("summary:", "  a:", 1) + "\n"
    recipe_case("alias-bomb", bomb, "SRG006", 2, doc="billion laughs: 9 levels of 9 aliases", subprocess=True)
    t = replace(BASE, "    must_match: [head_dim, num_kv_heads, sliding_window, layer_type]", "    must_match: &m [*m]")
    recipe_case("recursive-alias", t, "SRG008", 2, line_marker="must_match: &m",
                doc="an alias inside its own anchor: infinite nesting, stopped by the depth limit")
    t = replace(BASE, "    rule: last_unshared_of_type\n", "    rule: last_unshared_of_type\n    <<: 5\n")
    recipe_case("merge-key-scalar", t, "SRG107", 1, line_marker="<<: 5")
    t = replace(BASE, "version: 1\n", "version: &v 1\n")
    t = replace(t, "    rule: last_unshared_of_type\n", "    rule: last_unshared_of_type\n    <<: *v\n")
    recipe_case("merge-key-alias-to-scalar", t, "SRG107", 1, line_marker="<<: *v")
    t = replace(BASE, "summary: Gemma", "version: 1\nsummary: Gemma")
    recipe_case("duplicate-key-top-level", t, "SRG007", 2, line=line_of(t, "version: 1", 1), col=1)
    t = replace(BASE, "  - keep: {role: lm_head, tied_to: draft_embeddings}",
                "  - keep: {role: lm_head, role: input_embeddings}")
    recipe_case("duplicate-key-flow-mapping", t, "SRG007", 2, line_marker="role: lm_head, role:",
                col=col_of(t, "role: lm_head, role:", "role", 1))
    t = replace(BASE, "summary: Gemma 4 MTP assistant reads the target's KV cache, KV scales and input embeddings.",
                'summary: !!python/object/apply:os.system ["echo SPEC-SURGERY-PWNED"]')
    recipe_case("python-tag-apply", t, "SRG005", 2, line_marker="!!python", subprocess=True,
                doc="must be refused without executing anything (the subprocess run checks stdout)")
    t = replace(BASE, "summary: Gemma 4 MTP assistant reads the target's KV cache, KV scales and input embeddings.",
                "summary: !!python/name:os.system")
    recipe_case("python-tag-name", t, "SRG005", 2, line_marker="!!python")
    t = replace(BASE, "  kv_source:\n", "  kv_source: !include maps.yaml\n  other:\n")
    recipe_case("custom-tag-include", t, "SRG005", 2, line_marker="!include")
    t = replace(BASE, "summary: Gemma 4 MTP assistant reads the target's KV cache, KV scales and input embeddings.",
                "summary: !!binary aGVsbG8=")
    recipe_case("binary-tag", t, "SRG005", 2, line_marker="!!binary")
    t = replace(BASE, "  hf: {advance_draft_positions: false}", "  hf: !!set {a, b}")
    recipe_case("set-tag", t, "SRG005", 2, line_marker="!!set")
    # issue 34: tagged scalars PyYAML's constructors crash on (IndexError / ValueError out of
    # construct_yaml_int / _float): empty, underscore-only, sign-only, dot-only text
    tagged = [("int-empty", '!!int ""'), ("float-empty", '!!float ""'), ("int-underscore", '!!int "_"'),
              ("float-dot", '!!float "."'), ("int-sign", '!!int "-"')]
    for n, (slug, literal) in enumerate(tagged):
        for key, old in (("version", "version: 1\n"), ("recipe", "recipe: corpus-case\n")):
            t = replace(BASE, old, f"{key}: {literal}\n")
            recipe_case(f"tagged-{slug}-{key}", t, "SRG102", 1, line_marker=f"{key}: !!",
                        col=len(key) + 3, subprocess=(n == 0), doc=f"{key}: {literal} (issue 34: was a traceback)")
    t = replace(BASE, "version: 1\n", "version: 1.0e+400\n")
    recipe_case("huge-float-literal", t, "SRG102", 1, line_marker="version:", doc="1.0e+400 overflows to inf: non-finite")
    t = replace(BASE, "version: 1\n", "version: 1" + "0" * 100 + "\n")
    recipe_case("huge-int-version", t, "SRG105", 1, line_marker="version:", key="version")
    t = explicit({0: 13, 1: 13, 2: 13, 3: 10 ** 100})
    recipe_case("huge-int-layer-index", t, "SRG105", 1, line_marker="3: 1000", key="layer_maps.kv_source.pairs.3")
    t = replace(BASE, KV_MAP, "    rule: same_index\n    offset: .nan\n")
    recipe_case("nan-offset", t, "SRG102", 1, line_marker="offset: .nan")
    t = replace(BASE, "version: 1\n", "version: .inf\n")
    recipe_case("inf-version", t, "SRG102", 1, line_marker="version: .inf")
    recipe_case("empty-file", "", "SRG003", 2)
    recipe_case("only-comments", "# nothing here\n# still nothing\n", "SRG003", 2)
    recipe_case("only-null", "null\n", "SRG003", 2)
    recipe_case("only-tilde-document", "---\n~\n...\n", "SRG003", 2)
    recipe_case("binary-file", bytes(range(256)) * 4 + b"\x00\x00", "SRG002", 2, subprocess=True)
    recipe_case("non-utf8-bytes", BASE.replace("summary: Gemma 4", "summary: Gemma\xff 4").encode("utf-8").replace(
        "Gemma\xff".encode("utf-8"), b"Gemma\xff"), "SRG002", 2, line=line_of(BASE, "summary:"), subprocess=True)
    recipe_case("control-character", BASE.replace("summary: Gemma 4", "summary: Gemma\x07 4"), "SRG002", 2,
                doc="a BEL control character: PyYAML's reader refuses it")
    add("big-2mb", "@generated/big_2mb.yaml", TARGET, DRAFT, "SRG008", 2, {"file": "big_2mb.yaml"},
        "a 2 MB recipe (a long summary), created at test time", generate="big_2mb")
    recipe_case("deep-nesting-10000", "summary: " + "[" * 10000 + "]" * 10000 + "\n", "SRG008", 2, subprocess=True)
    recipe_case("deep-nesting-unclosed", "[" * 10000 + "\n", "SRG008", 2)
    recipe_case("deep-nesting-100-mapping", "".join("  " * i + f"k{i}:\n" for i in range(100)) + "  " * 100 + "x\n",
                "SRG008", 2, line=66, doc="100 nested block mappings, past the 64-level limit")
    t = BASE + "---\nrecipe: second\n"
    recipe_case("multiple-documents", t, "SRG004", 2, line=line_of(t, "recipe: second"))
    recipe_case("top-level-list", "- recipe: a\n- recipe: b\n", "SRG102", 1, line=1)
    recipe_case("top-level-scalar", "just a string\n", "SRG102", 1, line=1)
    t = replace(BASE, "engine:\n", "? [a, b]\n: 1\nengine:\n")
    recipe_case("complex-mapping-key", t, "SRG102", 1, line_marker="? [a, b]")
    add("recipe-missing-file", "recipes/does-not-exist.yaml", TARGET, DRAFT, "SRG001", 2,
        {"file": "does-not-exist.yaml"}, "", subprocess=True)
    add("recipe-is-directory", "recipes", TARGET, DRAFT, "SRG002", 2, {"file": "recipes"}, "")
    add("unknown-shipped-recipe-name", "name:gemma5-mtp", TARGET, DRAFT, "SRG013", 2, {"file": "gemma5-mtp"}, "")

    # ------------------------------------------------------------------ configs
    (CFG / "invalid-json.json").write_text('{\n  "model_type": "gemma4",\n  "hidden_size": 1536,\n}\n')
    add("config-invalid-json", "recipes/base.yaml", "configs/invalid-json.json", DRAFT, "SRG009", 2,
        {"file": "invalid-json.json", "line": 4, "col": 1}, "trailing comma", subprocess=True)
    (CFG / "nan.json").write_text('{\n  "model_type": "gemma4_assistant",\n  "backbone_hidden_size": NaN\n}\n')
    add("config-nan", "recipes/base.yaml", TARGET, "configs/nan.json", "SRG009", 2, {"file": "nan.json"}, "")
    (CFG / "duplicate-keys.json").write_text('{\n  "model_type": "gemma4",\n  "model_type": "llama"\n}\n')
    add("config-duplicate-keys", "recipes/base.yaml", "configs/duplicate-keys.json", DRAFT, "SRG009", 2,
        {"file": "duplicate-keys.json"}, "")
    (CFG / "empty.json").write_text("\n")
    add("config-empty", "recipes/base.yaml", "configs/empty.json", DRAFT, "SRG003", 2, {"file": "empty.json"}, "")
    (CFG / "top-level-list.json").write_text('[{"model_type": "gemma4"}]\n')
    add("config-top-level-list", "recipes/base.yaml", "configs/top-level-list.json", DRAFT, "SRG010", 2,
        {"file": "top-level-list.json"}, "")
    (CFG / "non-utf8.json").write_bytes(b'{"model_type": "gemma\xff4"}\n')
    add("config-non-utf8", "recipes/base.yaml", "configs/non-utf8.json", DRAFT, "SRG002", 2, {"file": "non-utf8.json"}, "")
    (CFG / "deep.json").write_text("[" * 100000 + "]" * 100000)
    add("config-deeply-nested-json", "recipes/base.yaml", "configs/deep.json", DRAFT, "SRG009", 2, {"file": "deep.json"},
        "100000 nested arrays: RecursionError in json must become a coded error")

    def drop(key):
        return lambda cfg: cfg.pop(key)

    c = config_variant("no-model-type.json", TARGET, drop("model_type"))
    add("config-without-model-type", "recipes/base.yaml", c, DRAFT, "SRG010", 2,
        {"file": "no-model-type.json", "key": "model_type"}, "")
    c = config_variant("layer-types-length.json", TARGET,
                       lambda cfg: cfg["text_config"].__setitem__("layer_types", cfg["text_config"]["layer_types"][:-1]))
    add("config-layer-types-length", "recipes/base.yaml", c, DRAFT, "SRG202", 1,
        {"file": "layer-types-length.json", "key": "text_config.layer_types"}, "34 layer types, 35 layers")
    c = config_variant("kv-shared-gt-layers.json", DRAFT, text_edit(num_kv_shared_layers=9))
    add("config-kv-shared-exceeds-layers", "recipes/base.yaml", TARGET, c, "SRG202", 1,
        {"file": "kv-shared-gt-layers.json", "key": "text_config.num_kv_shared_layers"}, "")
    c = config_variant("negative-hidden.json", TARGET, text_edit(hidden_size=-1536))
    add("config-negative-hidden-size", "recipes/base.yaml", c, DRAFT, "SRG205", 1,
        {"file": "negative-hidden.json", "key": "text_config.hidden_size"}, "")
    c = config_variant("string-hidden.json", TARGET, text_edit(hidden_size="1536"))
    add("config-string-hidden-size", "recipes/base.yaml", c, DRAFT, "SRG205", 1,
        {"file": "string-hidden.json", "key": "text_config.hidden_size"}, "")
    c = config_variant("huge-layers.json", TARGET, text_edit(num_hidden_layers=10 ** 30))
    add("config-huge-layer-count", "recipes/base.yaml", c, DRAFT, "SRG205", 1,
        {"file": "huge-layers.json", "key": "text_config.num_hidden_layers"}, "")
    c = config_variant("text-config-list.json", TARGET, lambda cfg: cfg.__setitem__("text_config", [1, 2]))
    add("config-text-config-not-object", "recipes/base.yaml", c, DRAFT, "SRG202", 1,
        {"file": "text-config-list.json", "key": "text_config"}, "")
    d = CFG / "model-without-config"
    d.mkdir(exist_ok=True)
    (d / "tokenizer_config.json").write_text("{}\n")
    add("config-dir-without-config-json", "recipes/base.yaml", "configs/model-without-config", DRAFT, "SRG001", 2,
        {"file": "model-without-config"},
        "catalogue: SRG002 explain lists 'a directory without config.json'")
    add("config-missing-file", "recipes/base.yaml", "configs/nope.json", DRAFT, "SRG001", 2, {"file": "nope.json"}, "")

    # ------------------------------------------------------------------ recipe x pair (resolver)
    markers = {"layer_maps.kv_source": "rule: last_unshared_of_type",
               "requires[0].that": "that: draft.backbone_hidden_size", "requires[1].that": "that: draft.num_kv_shared",
               "requires[2].that": "that: draft.vocab_size"}

    def draft_variant(cid, name, edit, code, key, doc="", recipe="recipes/base.yaml"):
        c = config_variant(name, DRAFT, edit)
        if recipe == "@shipped":  # the shipped recipe may be edited by others: key path only
            loc = {"file": "gemma4-mtp.yaml", "key": key}
        else:
            loc = {"file": Path(recipe).name, "line": line_of(BASE, markers[key]), "key": key}
        add(cid, recipe, TARGET, c, code, 1, loc, doc)

    draft_variant("draft-unknown-layer-type", "draft-chunked.json",
                  lambda cfg: cfg["text_config"]["layer_types"].__setitem__(1, "chunked_attention"),
                  "SRG302", "layer_maps.kv_source", "no producer of chunked_attention in the target")
    draft_variant("head-dim-mismatch", "draft-head-dim-128.json", text_edit(head_dim=128), "SRG303", "layer_maps.kv_source")
    draft_variant("kv-heads-mismatch", "draft-kv-heads-2.json", text_edit(num_key_value_heads=2), "SRG304",
                  "layer_maps.kv_source")
    draft_variant("sliding-window-mismatch", "draft-window-1024.json", text_edit(sliding_window=1024), "SRG305",
                  "layer_maps.kv_source")
    draft_variant("vocab-mismatch", "draft-vocab-32000.json", text_edit(vocab_size=32000), "SRG313",
                  "requires[2].that", recipe="@shipped")
    draft_variant("backbone-hidden-size-mismatch", "draft-backbone-2048.json",
                  lambda cfg: cfg.__setitem__("backbone_hidden_size", 2048), "SRG314", "requires[0].that")
    draft_variant("draft-not-all-kv-shared", "draft-kv-shared-2.json", text_edit(num_kv_shared_layers=2), "SRG308",
                  "requires[1].that", recipe="@shipped")
    add("applies-to-target-mismatch", "recipes/base.yaml", "configs/Llama-3.1-8B-Instruct.json", DRAFT, "SRG204", 1,
        {"file": "base.yaml", "line": line_of(BASE, "  target:"), "key": "applies_to.target.model_type"}, "llama target")
    add("applies-to-draft-mismatch", "recipes/base.yaml", TARGET, TARGET, "SRG204", 1,
        {"file": "base.yaml", "line": line_of(BASE, "  draft:"), "key": "applies_to.draft.model_type"},
        "the target config given as draft")
    add("pp2-embedding-share-impossible", "@shipped", TARGET, DRAFT, "SRG311", 1,
        {"file": "gemma4-mtp.yaml", "key": "ops[2].share_module.when"}, "", args=["--pp", "2"], subprocess=True,
        also=[{"code": "SRG316", "location": {"file": "gemma4-mtp.yaml", "key": "layer_maps.kv_source"}}])
    add("pp2-corpus-recipe", "recipes/base.yaml", TARGET, DRAFT, "SRG316", 1,
        {"file": "base.yaml", "line": line_of(BASE, "  kv_source:") + 1, "key": "layer_maps.kv_source"}, "",
        args=["--pp", "2"], command="plan",
        also=[{"code": "SRG311", "location": {"file": "base.yaml", "line": line_of(BASE, "when: pp_size == 1"),
                                              "key": "ops[2].share_module.when"}}])
    t2 = config_variant("target-kv-heads-2.json", TARGET, text_edit(num_key_value_heads=2))
    d2 = config_variant("draft-kv-heads-2-for-tp.json", DRAFT, text_edit(num_key_value_heads=2))
    add("tp3-kv-heads-not-divisible", "recipes/base.yaml", t2, d2, "SRG310", 1,
        {"file": "base.yaml", "key": "layer_maps.kv_source"}, "2 KV heads, tp 3", args=["--tp", "3"])

    # ------------------------------------------------------------------ contradictions (issue 48)
    def add_step(step: str, text: str = BASE) -> str:
        return replace(text, "\nengine:\n", "\n" + step + "engine:\n")

    def step_place(cid: str, text: str, marker: str, nth: int = 0) -> str:
        return f"{cid}.yaml:{line_of(text, marker, nth)}"

    cid = "contradiction-share-and-keep-embeddings"
    t = add_step("  - keep: {role: input_embeddings}\n")
    recipe_case(cid, t, "SRG125", 1, line_marker="- keep: {role: input_embeddings}", col=5, key="ops[4]",
                says=[step_place(cid, t, "- share_module:"), step_place(cid, t, "- keep: {role: input_embeddings}")],
                doc="shares the target's embedding and keeps the draft's own: both steps' file:line are named")
    cid = "contradiction-share-policy"
    t = add_step("  - share_module: {role: input_embeddings, if_draft_has_own: keep}\n")
    recipe_case(cid, t, "SRG125", 1, line_marker="if_draft_has_own: keep}", col=5, key="ops[4]",
                says=[step_place(cid, t, "- share_module:"), step_place(cid, t, "if_draft_has_own: keep}")],
                doc="one op kind, two policies for one role")
    cid = "contradiction-kv-source"
    t = replace(BASE, "layer_maps:\n", "layer_maps:\n  other:\n    rule: explicit\n    pairs: {0: 14, 1: 14, 2: 14, 3: 14}\n")
    t = add_step("  - share_kv: {map: other}\n", t)
    recipe_case(cid, t, "SRG125", 1, line_marker="- share_kv: {map: other}", col=5, key="ops[4]",
                says=[step_place(cid, t, "- share_kv: {map: kv_source}"), step_place(cid, t, "- share_kv: {map: other}")],
                doc="draft layers 0-2 read target layer 13 by one map and 14 by the other")
    cid = "contradiction-in-one-step"
    t = replace(BASE, "        - {attrs: [_k_scale_cpu, _v_scale_cpu], mode: copy_inplace}\n",
                "        - {attrs: [_k_scale_cpu, _v_scale_cpu], mode: copy_inplace}\n"
                "        - {attrs: [_k_scale], mode: assign}\n")
    recipe_case(cid, t, "SRG125", 1, line_marker="- copy_attrs:", col=5, key="ops[1]",
                says=[step_place(cid, t, "- copy_attrs:") + ")", "two ways"],
                doc="copy_attrs copies _k_scale twice, two modes: one step named")
    cid = "duplicate-step"
    t = add_step("  - keep: {role: lm_head, tied_to: draft_embeddings, because: said again}\n")
    recipe_case(cid, t, "SRG126", 1, line_marker="because: said again", col=5, key="ops[4]",
                says=[step_place(cid, t, "- keep: {role: lm_head, tied_to: draft_embeddings}"),
                      step_place(cid, t, "because: said again")],
                doc="an exact duplicate (only `because` differs, which changes nothing) is refused, not listed twice")
    cid = "duplicate-in-one-step"
    t = replace(BASE, "        - {attrs: [_k_scale_cpu, _v_scale_cpu], mode: copy_inplace}\n",
                "        - {attrs: [_k_scale_cpu, _v_scale_cpu], mode: copy_inplace}\n"
                "        - {attrs: [_v_scale], mode: clone_keep_registration}\n")
    recipe_case(cid, t, "SRG126", 1, line_marker="- copy_attrs:", col=5, key="ops[1]",
                says=[step_place(cid, t, "- copy_attrs:") + ")", "twice"],
                doc="two rules of one step copy _v_scale the same way (one list repeating an item is SRG106)")

    # ------------------------------------------------------------------ command line
    add("cli-pp-zero", "recipes/base.yaml", TARGET, DRAFT, "SRG011", 2, None,
        "SRG011 is a usage error (exit 2 in the catalogue)", args=["--pp", "0"])
    add("cli-pp-huge", "recipes/base.yaml", TARGET, DRAFT, "SRG011", 2, None,
        "an absurd pp size must be refused fast, not resolved", args=["--pp", "100000"], isolate=True)
    add("cli-tp-not-int", "recipes/base.yaml", TARGET, DRAFT, "SRG011", 2, None, "", args=["--tp", "x"])
    add("cli-unknown-flag", "recipes/base.yaml", TARGET, DRAFT, "SRG011", 2, None, "", args=["--ppp", "2"])
    add("cli-missing-draft", "recipes/base.yaml", TARGET, None, "SRG011", 2, None, "--draft omitted")

    write_manifest()


def write_manifest() -> None:
    import yaml

    header = ("# Broken-input corpus, generated by make_corpus.py (edit that, then rerun it).\n"
              "# recipe: path relative to tests/corpus; '@shipped' = the repo's recipes/gemma4-mtp.yaml;\n"
              "#   'name:X' = a shipped recipe by short name; '@generated/F' = created at test time (generate: kind).\n"
              "# target/draft: config paths relative to tests/corpus (null: option omitted).\n"
              "# location: file = basename expected in the diagnostic's location, line/col 1-based, key = key path;\n"
              "#   null for command-line usage errors. also: further diagnostics expected in the same run.\n"
              "# says: text the primary diagnostic's message must hold (e.g. both steps' file:line).\n"
              "# command: validate unless given. subprocess: also run as `python -m surgery`.\n"
              "# isolate: run only as a subprocess with a timeout (known to hang in-process).\n")
    for c in cases:
        c.setdefault("command", "validate")
        if not c.get("doc"):
            c.pop("doc", None)
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    (HERE / "cases.yaml").write_text(header + yaml.safe_dump(cases, sort_keys=False, width=120), encoding="utf-8")
    print(f"{len(cases)} cases")


if __name__ == "__main__":
    os.chdir(HERE)
    build()
