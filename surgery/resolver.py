"""Recipe + draft facts + target facts + runtime -> Plan.

All checks happen at plan time, from config.json alone: here applies_to, requirements, every layer
map expanded and each pair checked (the map's `must_match`: head_dim, KV heads, window, type; a
producer for every draft layer type), pipeline-parallel constraints, each operation's condition,
contradictions and engine refusals; in each op kind's folder (`OpUnit.check_recipe` / `check`, called
from here) what only that kind needs (share_kv: the target layer writes its own KV, splits over
tensor parallelism, lives on the draft's stage; share_module: the shapes fit). Nothing here imports
torch, transformers or vllm.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from . import expr as expr_lang
from .engine import servedarch
from .engine.cards import card_location, engine_limits
from .text.diagnostics import ERROR, INFO, WARNING, Diagnostic, Location, diag, fail
from .facts import ModelFacts
from .pipeline import pp_layer_range, stage_of_layer
from .ops.base import Operation
from .ops.common import MATCH_CODES, compact_ranges
from .ops.registry import UNITS
from .plan import MapRow, Plan, Runtime, Skipped
from .recipe import LayerMapSpec, LayerSetSpec, OpSpec, Recipe
from .recipe import load_recipe
from .resources import shipped_recipes
from .engine.cards import card
from .engine.native import sglang_kv_map
from .engine.releases import known, release


MAX_PARALLEL = 4096
# Config fields whose class default describes one member of a family, not this checkpoint (issue 42):
# Gemma4TextConfig's hidden_size 2304 is no released Gemma 4; a layer_types derived with period 6 is not
# E2B's period 5. A default for one of them that decides a KV map or a compared value is said aloud
# (SRG208, warning). Family-wide defaults (vocab_size, bos / eos / pad ids: the family's tokenizer) stay
# SRG203 notes. Key (as config.json spells it) -> the fact an expression names.
MEMBER_GEOMETRY = {"hidden_size": "hidden_size", "num_hidden_layers": "num_hidden_layers",
                   "num_attention_heads": "num_attention_heads", "num_key_value_heads": "num_kv_heads",
                   "head_dim": "head_dim", "global_head_dim": "global_head_dim", "sliding_window": "sliding_window",
                   "layer_types": "layer_type_set", "num_kv_shared_layers": "num_kv_shared_layers",
                   "backbone_hidden_size": "backbone_hidden_size",
                   "hidden_size_per_layer_input": "hidden_size_per_layer_input"}
# the keys the engine builds a model's weight shapes from: a default there is said aloud even when no
# recipe value compares it (issue 42 class 7: a draft without hidden_size validated, nothing said); not
# head_dim, which MLA configs (DeepSeek) leave out on purpose
WEIGHT_SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                     "backbone_hidden_size", "hidden_size_per_layer_input")
# the keys a layer map's rows are built from (per-layer type, head_dim, KV heads, window, KV-shared flag)
KV_MAP_KEYS = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "global_head_dim",
               "sliding_window", "layer_types", "num_kv_shared_layers")


class _Env:
    """Name lookup for expressions: runtime facts and draft.X / target.X. Every model fact looked up is
    remembered (`seen`): a default behind one of them decided a compared value (SRG208)."""

    def __init__(self, draft: ModelFacts, target: ModelFacts, runtime: Runtime):
        self.models = {"draft": draft, "target": target}
        self.runtime = runtime
        self.seen: set[str] = set()

    def __call__(self, name: str) -> Any:
        side, _, fact = name.partition(".")
        if fact:
            self.seen.add(name)
            return self.models[side].scalars.get(fact)
        return self.runtime.lookup(name)


def _summary(f: ModelFacts) -> dict:
    return {"model_type": f.model_type, "text_model_type": f.text_model_type, "architecture": f["architecture"],
            "source": f.source, "num_layers": f.num_layers, "num_kv_shared_layers": f["num_kv_shared_layers"],
            "hidden_size": f["hidden_size"], "vocab_size": f["vocab_size"],
            "layer_types": [layer.layer_type for layer in f.layers], "pin": f.pin()}


#: runtime facts that are None when the caller did not say (the CLI flag that sets each one)
UNKNOWN_RUNTIME = {"device": "--device"}


@lru_cache(maxsize=1)
def _shipped() -> tuple[Recipe, ...]:

    return tuple(load_recipe(path) for path in shipped_recipes())


def shipped_recipes_applying(draft: ModelFacts, target: ModelFacts) -> list[str]:
    """The shipped recipes whose applies_to admits both models (the same rule as `check_applies_to`, with
    no diagnostics kept): what SRG204's hint offers instead."""
    out = []
    for recipe in _shipped():
        probe = _Resolver(recipe, draft, target, Runtime())
        probe.hinting = False
        probe.check_applies_to()
        if not any(d.code in ("SRG204", "SRG207") for d in probe.diags):
            out.append(recipe.name)
    return out


class _Resolver:
    hinting = True

    def __init__(self, recipe: Recipe, draft: ModelFacts, target: ModelFacts, runtime: Runtime):
        self.recipe, self.draft, self.target, self.runtime = recipe, draft, target, runtime
        self.env = _Env(draft, target, runtime)
        self.diags: list[Diagnostic] = []
        self.skipped: list[Skipped] = []
        self.ops: list[Operation] = []
        self.maps: dict[str, tuple[MapRow, ...]] = {}
        self.sets: dict[str, tuple[int, ...]] = {}

    # -- helpers -----------------------------------------------------------------------------
    def add(self, code: str, message: str, location: Location | None = None, hint: str | None = None,
            severity: str | None = None) -> None:
        self.diags.append(diag(code, message, location, hint, severity))

    def evaluate(self, e: expr_lang.Expr, path: tuple) -> Any:
        try:
            return e.evaluate(self.env)
        except expr_lang.ExprError as exc:
            self.add(exc.code, f"{exc.message} in `{e.text}`", self.recipe.location(path))
            return None

    def _values_of(self, e: expr_lang.Expr) -> str:
        shown = []
        for name, _ in e.names:
            value = self.env(name)
            shown.append(f"{name}={value!r}")
        return ", ".join(dict.fromkeys(shown))

    # -- steps -------------------------------------------------------------------------------
    def run(self) -> Plan:
        self.check_runtime()
        self.check_applies_to()
        self.check_requirements()
        for name, spec in self.recipe.layer_maps.items():
            self.maps[name] = self.expand_map(spec)
        for name, lset in self.recipe.layer_sets.items():
            self.sets[name] = self.expand_set(lset)
        self.check_recipe_steps()
        for op in self.recipe.ops:
            self.expand_op(op)
        self.check_contradictions()
        self.check_engine_refusals()
        self.check_positional()
        defaults = {}
        for side, f in (("target", self.target), ("draft", self.draft)):
            defaults[side] = [d.to_dict() for d in f.defaults_used]
            defaulted = {d.key for d in f.defaults_used}
            for d in f.defaults_used:
                whole = d.key.split("[", 1)[0]
                decides = None if whole != d.key and whole in defaulted else self.default_decides(side, f, d.key)
                if decides:
                    stated = _stated(f.raw, d.key)
                    origin = ("from the transformers config class, not from config.json" if stated is _ABSENT else
                              f"made by the transformers config class from the {stated!r} config.json states "
                              "(its __post_init__ replaces that value)")
                    self.add("SRG208", f"{side} {d.key}: {d.value!r} {origin}; it decides {decides}",
                             Location(f.source, key_path=d.key),
                             "write the field into config.json as the checkpoint has it")
                else:
                    self.add("SRG203", f"{side} {d.key} missing; used {d.value!r}", Location(f.source, key_path=d.key))
        return Plan(
            recipe=self.recipe.name, recipe_file=self.recipe.file, runtime=self.runtime,
            target=_summary(self.target), draft=_summary(self.draft), layer_maps=self.maps,
            map_rules={n: s.rule for n, s in self.recipe.layer_maps.items()},
            operations=tuple(self.ops), skipped=tuple(self.skipped), diagnostics=tuple(self.diags),
            engine_hints=self.recipe.engine, defaults_used=defaults, layer_sets=dict(self.sets),
        )

    def default_decides(self, side: str, f: ModelFacts, key: str) -> str | None:
        """What a default for `key` decided in this plan, when `key` is a member-geometry field
        (MEMBER_GEOMETRY): the KV map(s) it builds, and the facts the recipe compared; else None."""
        base = key[len(f.key_prefix):] if key.startswith(f.key_prefix) else key
        base = base.split("[", 1)[0]
        if base not in MEMBER_GEOMETRY:
            return None
        out = []
        maps = [name for name, rows in self.maps.items() if rows]
        if base in KV_MAP_KEYS and maps:
            shown = {name: ", ".join(f"{r.draft}->{r.target}" for r in self.maps[name][:6]) for name in maps}
            out.append("the layer map " + "; ".join(f"{name} ({rows})" for name, rows in shown.items()))
        fact = f"{side}.{MEMBER_GEOMETRY[base]}"
        if fact in self.env.seen or (base == "num_hidden_layers" and f"{side}.num_unshared_layers" in self.env.seen):
            out.append(f"the compared value {fact} = {f.scalars.get(MEMBER_GEOMETRY[base])!r}")
        if not out and base in WEIGHT_SHAPE_KEYS:  # nothing compared it, but the engine builds the weights with it
            out.append(f"the shapes vLLM builds the {side}'s weights with (a checkpoint of another {base} fails to load)")
        return " and ".join(out) or None

    def check_applies_to(self) -> None:
        """Whether the recipe is for these models, by the architecture vLLM resolves (issue 42).

        vLLM builds a target from its model registry by the config's `architectures`, whatever the
        model_type (Kimi-K2 is `kimi_k2` on DeepseekV3ForCausalLM), and, for the methods whose draft config
        it wraps in EAGLEConfig (eagle, eagle3, dflash: the engine card's `draft_architecture_rewrite`), a
        draft by its served architecture alone (SpecForge's phi-4 head is a LlamaForCausalLMEagle3 with
        model_type phi3). So where the recipe lists architectures and the config names one, the
        architecture decides; the model_type list is the fallback (a config with no architectures, or a
        method such as dspark or mtp where vLLM keys on the model_type). SRG690 (info) says when the
        architecture admitted a model type the recipe does not list; SRG204's hint says what vLLM would
        build and which shipped recipe fits."""
        for side, f in (("target", self.target), ("draft", self.draft)):
            sel = self.recipe.applies_to[side]
            types = sel.get("model_type")
            archs = sel.get("architectures")
            type_ok = types is None or f.model_type in types or f.text_model_type in types
            if archs is not None and f.architectures:
                matched = set(f.architectures) & set(archs)
                if not matched and side == "draft":
                    if self.check_sglang_eagle_class(archs) or self.check_served_architecture(archs):
                        matched = {"served"}
                if not matched and side == "target" and self.sglang_builds_target(f, archs):
                    continue
                if not matched:
                    self.add("SRG204", f"{side} architectures {list(f.architectures)} not in {self._shown(archs)}",
                             self.recipe.location(("applies_to", side, "architectures")),
                             self.applies_hint(side) if self.hinting else None)
                    continue
                if type_ok:
                    continue
                if side == "target" or self.method() in servedarch.rewrite_rules():
                    self.add("SRG690", f"{side} model_type {f.model_type!r} is not in the recipe's model_type list, "
                             f"but vLLM builds the {side} by its architecture ({', '.join(f.architectures)}), which the "
                             f"recipe lists", Location(f.source, key_path=f.key_prefix + "model_type"))
                    continue
            if not type_ok:
                self.add("SRG204", f"{side} model_type {f.model_type!r} is not one this recipe applies to "
                         f"({self._shown(types)})", self.recipe.location(("applies_to", side, "model_type")),
                         self.applies_hint(side) if self.hinting else None)

    @staticmethod
    def _shown(names, limit: int = 4) -> str:
        names = list(names)
        return ", ".join(names) if len(names) <= limit else f"{', '.join(names[:limit])}, ... ({len(names)} in all)"

    def method(self) -> str | None:
        return (self.recipe.engine.get("vllm") or {}).get("method")

    def applies_hint(self, side: str) -> str:
        """What vLLM would build for this side, and the shipped recipes whose applies_to admits both models."""
        f = getattr(self, side)
        archs = list(f.architectures)
        if side == "draft" and self.method():
            archs = list(servedarch.served_architectures(self.method(), archs))
        built = servedarch.vllm_class_of(archs, draft=side == "draft") if archs else None
        what = (f"vLLM would build {built}" if built else
                f"vLLM would look up {', '.join(archs)} in its model registry" if archs else
                "the config names no architecture")
        fits = [name for name in shipped_recipes_applying(self.draft, self.target) if name != self.recipe.name]
        return (f"{what} ({side} config: {f.source}); "
                + (f"shipped recipe{'s' if len(fits) > 1 else ''} that fit{'s' if len(fits) == 1 else ''} this pair: "
                   f"{', '.join(fits)}" if fits else "no shipped recipe fits this pair (`surgery recipes` lists them)"))

    def sglang_builds_target(self, f, archs) -> bool:
        """For SGLang: the recipe's architecture list is vLLM's (the targets vLLM serves the method on); a
        target class the judged SGLang release registers is built there (SRG872, a note), never refused
        with vLLM's list (issue 65: a LongCat or Gemma 3 target SGLang serves)."""
        if self.runtime.engine != "sglang":
            return False
        rel, _ = release("sglang", self.runtime.engine_version or known("sglang")[-1])
        if rel is None or not any(rel.registers(a) for a in f.architectures):
            return False
        self.add("SRG872", f"target architectures {list(f.architectures)} are not in the recipe's list "
                 f"({self._shown(archs)}: the targets vLLM serves it on), but SGLang {rel.asked} registers the class "
                 "and builds this target", Location(f.source, key_path=f.key_prefix + "architectures"), severity=INFO)
        return True

    def check_sglang_eagle_class(self, archs) -> bool:
        """For SGLang: a head written with SGLang's own EAGLE-1 class (the engine card's
        `wiring.eagle_draft_architectures`, e.g. LlamaForCausalLMEagle) is the head vLLM serves from the
        plain name; matched as that (SRG206), so the recipe resolves on the config SGLang is given."""
        if self.runtime.engine != "sglang":
            return False

        inverse = {v: k for k, v in card("sglang").wiring.eagle_draft_architectures.items()}
        f = self.draft
        plain = [inverse.get(a, a) for a in f.architectures]
        if plain == list(f.architectures):
            return False
        method = (self.recipe.engine.get("vllm") or {}).get("method")
        served = servedarch.served_architectures(method, plain)
        if not set(served) & set(archs):
            return False
        self.add("SRG206", f"draft architectures {list(f.architectures)}: SGLang's EAGLE-1 class for {plain}, which vLLM "
                 f"serves under method {method} as {list(served)}", Location(f.source, key_path=f.key_prefix + "architectures"))
        return True

    def check_served_architecture(self, archs) -> bool:
        """The draft's architectures as vLLM serves them under the recipe's method (surgery/engine/servedarch.py):
        True (with SRG206) where the renamed name is one the recipe lists; a renamed plain config under
        eagle3 with none of the EAGLE-3 markers is refused (SRG207) instead of served as a guess."""
        method = (self.recipe.engine.get("vllm") or {}).get("method")
        f = self.draft
        served = servedarch.served_architectures(method, f.architectures)
        if not set(served) & set(archs):
            return False
        where = Location(f.source, key_path=f.key_prefix + "architectures")
        renamed = ", ".join(f"{a} -> {s}" for a, s in zip(f.architectures, served) if a != s)
        if method == "eagle3":
            markers = servedarch.eagle3_markers(f.raw)
            if not markers:
                self.add("SRG207", f"draft architectures {list(f.architectures)}: vLLM would serve them as "
                         f"{list(served)} (EAGLEConfig, method eagle3), but the config has none of the EAGLE-3 "
                         f"markers ({', '.join(servedarch.EAGLE3_MARKERS)})", where)
                return True
            renamed += f"; EAGLE-3 markers: {', '.join(markers)}"
        self.add("SRG206", f"draft architectures {list(f.architectures)} read as vLLM reads them under method "
                 f"{method}: {renamed} (transformers_utils/configs/eagle.py EAGLEConfig)", where)
        return True

    def check_requirements(self) -> None:
        """Each `requires:` entry. One that reads a runtime fact the caller did not give (UNKNOWN_RUNTIME: the
        device, when `validate` has no --device) cannot be decided: a note that names the flag, not a warning
        on every run of a standard pair (issue 42 class 9, SRG334 on every Gemma 4 E2B/E4B run)."""
        for req in self.recipe.requires:
            if req.when is not None and self.evaluate(req.when, req.path + ("when",)) is not True:
                continue
            value = self.evaluate(req.that, req.path + ("that",))
            if value is None and any(d.code in ("SRG112",) for d in self.diags[-1:]):
                continue
            if value is not True:
                unknown = [UNKNOWN_RUNTIME[n] for n, _ in req.that.names
                           if n in UNKNOWN_RUNTIME and self.env(n) is None]
                if unknown:  # it reads a runtime fact nobody told us: undecided, a note naming the flag
                    self.add(req.code, f"requirement `{req.that.text}` not checked ({self._values_of(req.that)}: "
                             f"not known here, pass {', '.join(dict.fromkeys(unknown))}): it fails unless it holds: "
                             f"{req.because}", self.recipe.location(req.path + ("that",)), severity=INFO)
                    continue
                self.add(req.code, f"requirement `{req.that.text}` does not hold ({self._values_of(req.that)}): "
                         f"{req.because}", self.recipe.location(req.path + ("that",)),
                         severity=WARNING if req.severity == "warning" else ERROR)

    def check_runtime(self) -> None:
        rt = self.runtime
        for name in ("pp_size", "tp_size"):
            value = getattr(rt, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PARALLEL:
                raise fail("SRG011", f"{name} must be an integer in 1..{MAX_PARALLEL}, got {value!r}")
        if rt.pp_size > self.target.num_layers:
            self.add("SRG316", f"pp_size {rt.pp_size} is larger than the target's {self.target.num_layers} layers: "
                     "some pipeline stages would hold no layer", Location(self.target.source,
                                                                          key_path=self.target.key_prefix + "num_hidden_layers"))
        elif rt.pp_size > 1:
            self.check_own_kv_sharing_split()
            self.check_engine_runs_spec_decode_under_pp()
            self.check_target_per_layer_inputs_under_pp()

    def check_engine_runs_spec_decode_under_pp(self) -> None:
        """Every recipe wires a draft, i.e. speculative decoding; an engine runner that cannot start it
        under pipeline parallelism (the engine card's `limits.speculative_pp_fails_on_devices`) fails
        at start whatever the recipe does, so the plan says so first (SRG351): an error on those
        devices, a note when the device is not known (`validate --device`): the failing runner is vLLM's V1
        runner, which GPUs with Triton do not run by default (config/vllm.py `use_v2_model_runner`), so
        an unknown device is no known risk, and a warning would fire on every `--pp 2`."""
        rt = self.runtime
        devices = engine_limits(rt.engine).speculative_pp_fails_on_devices
        if not devices or (rt.device is not None and rt.device not in devices):
            return
        where = f"on {rt.device}" if rt.device is not None else \
            f"on {', '.join(devices)} (device not known here: pass --device)"
        self.add("SRG351", f"{rt.engine} cannot start speculative decoding with pp_size {rt.pp_size} {where}: its "
                 "V1 model runner creates the drafter on the last pipeline stage only and reads it on every stage "
                 "while initialising the KV cache",
                 card_location(rt.engine, "limits.speculative_pp_fails_on_devices"),
                 severity=ERROR if rt.device is not None else INFO)

    def check_target_per_layer_inputs_under_pp(self) -> None:
        """The target's own decoding under pipeline parallelism: an engine whose model code drops the
        per-layer inputs on later stages (the engine card's `limits.pp_loses_per_layer_inputs`) starts
        and then decodes wrongly, silently; the plan says so first (SRG352)."""
        rt, t = self.runtime, self.target
        types = engine_limits(rt.engine).pp_loses_per_layer_inputs
        width = t.scalars.get("hidden_size_per_layer_input") or 0
        if not width or not ({t.model_type, t.text_model_type} & set(types)):
            return
        self.add("SRG352", f"{rt.engine}'s {t.text_model_type} model drops the per-layer inputs "
                 f"(hidden_size_per_layer_input={width}) on every pipeline stage after the first: with pp_size "
                 f"{rt.pp_size} the target decodes differently from pp_size 1, silently",
                 t.key_location("hidden_size_per_layer_input"))

    def check_own_kv_sharing_split(self) -> None:
        """The target's OWN KV-shared tail must sit on the same pipeline stage as the layers it reads.

        vLLM places layers with `get_pp_indices` (surgery/pipeline.py) without regard to KV sharing;
        a Gemma 4 E2B/E4B split through the shared tail makes the engine fail inside the worker
        ("Specified KV sharing target layer ... is not a valid Attention layer"), with or without a
        draft. Reported here, before any engine start, with the split and the layers involved."""
        if self.runtime.engine != "vllm":  # vLLM's layer split and its refusal (SGLang's own: SRG773)
            return
        n, pp = self.target.num_layers, self.runtime.pp_size
        crossing: dict[tuple[int, int, int], list[int]] = {}
        for reader, source in self.target.own_kv_sources().items():
            rs, ss = stage_of_layer(n, reader, pp), stage_of_layer(n, source, pp)
            if rs != ss:
                crossing.setdefault((source, ss, rs), []).append(reader)
        if not crossing:
            return
        split = " | ".join(f"stage {r}: layers {a}..{b - 1}" for r, (a, b) in
                           enumerate(pp_layer_range(n, r, pp) for r in range(pp)))
        reads = "; ".join(f"layers {compact_ranges(readers)} (stage {r_stage}) read layer {source} (stage {s_stage})"
                          for (source, s_stage, r_stage), readers in sorted(crossing.items()))
        self.add("SRG350", f"the target's own KV sharing crosses pipeline stages with pp_size {pp}: {reads} "
                 f"[{split}]", self.target.key_location("num_kv_shared_layers"))

    def expand_map(self, spec: LayerMapSpec) -> tuple[MapRow, ...]:
        pairs: list[tuple[int, int]] = []
        n_draft, n_target = self.draft.num_layers, self.target.num_layers
        loc = self.recipe.location(spec.path)
        if spec.rule == "last_unshared_of_type":
            last_of_type = self.target.last_unshared_by_type()
            for d in self.draft.layers:
                t = last_of_type.get(d.layer_type)
                if t is None:
                    producers = ", ".join(sorted(last_of_type)) or "none"
                    self.add("SRG302", f"map {spec.name}: draft layer {d.index} is {d.layer_type!r} but the target has "
                             f"no non-KV-shared layer of that type (types with a producer: {producers})", loc)
                    continue
                pairs.append((d.index, t))
        elif spec.rule == "same_index":
            for d in self.draft.layers:
                t = d.index + spec.offset
                if not 0 <= t < n_target:
                    self.add("SRG309", f"map {spec.name}: draft layer {d.index} + offset {spec.offset} = target layer {t}, "
                             f"outside 0..{n_target - 1}", loc)
                    continue
                pairs.append((d.index, t))
        else:  # explicit
            assert spec.pairs is not None
            for d, t in sorted(spec.pairs.items()):
                where = self.recipe.location(spec.path + ("pairs", str(d)))
                if d >= n_draft:
                    self.add("SRG309", f"map {spec.name}: draft layer {d} does not exist (draft has {n_draft} layers)", where)
                    continue
                if t >= n_target:
                    self.add("SRG309", f"map {spec.name}: target layer {t} does not exist (target has {n_target} layers)",
                             where)
                    continue
                pairs.append((d, t))
            missing = sorted(set(range(n_draft)) - set(spec.pairs))
            if missing:
                self.add("SRG315", f"map {spec.name}: draft layer(s) {compact_ranges(missing)} have no target layer",
                         loc, "add them to `pairs`")
        rows = []
        for d, t in pairs:
            dl, tl = self.draft.layers[d], self.target.layers[t]
            for fact in spec.must_match:
                dv, tv = dl.get(fact), tl.get(fact)
                if dv != tv:
                    self.add(MATCH_CODES[fact], f"map {spec.name}: draft layer {d} {fact}={dv!r} but target layer {t} "
                             f"{fact}={tv!r}", loc, f"draft: {self.draft.source}; target: {self.target.source}")
            rows.append(MapRow(d, t, dl.layer_type, tl.layer_type, tl.head_dim, tl.num_kv_heads, tl.sliding_window))
        return tuple(rows)

    def check_recipe_steps(self) -> None:
        """Each op kind's plan-time check over all its steps (`OpUnit.check_recipe`: share_kv's KV maps),
        in registry order, before any step expands and whatever their `when`."""
        for kind, unit in UNITS.items():
            steps = [op for op in self.recipe.ops if op.kind == kind]
            if steps and unit.check_recipe is not None:
                unit.check_recipe(self, steps)

    def _int(self, e: expr_lang.Expr | None, path: tuple, what: str) -> int | None:
        if e is None:
            return None
        value = self.evaluate(e, path)
        if value is None:
            if not self.diags or self.diags[-1].code != "SRG112":
                self.add("SRG112", f"{what} `{e.text}` is null ({self._values_of(e)})", self.recipe.location(path))
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.add("SRG112", f"{what} `{e.text}` must give an integer, got {value!r}", self.recipe.location(path))
            return None
        return value

    def expand_set(self, spec: LayerSetSpec) -> tuple[int, ...]:
        """A layer set: its indices, sorted and de-duplicated (as vLLM stores aux layers), bounds-checked."""
        loc = self.recipe.location(spec.path)
        if spec.when is not None:
            value = self.evaluate(spec.when, spec.path + ("when",))
            if value is not True:
                if value is not None:
                    self.add("SRG320", f"layer set {spec.name} is empty: `{spec.when.text}` is false "
                             f"({self._values_of(spec.when)})", self.recipe.location(spec.path + ("when",)))
                return ()
        indices: list[int] = []
        origin = ""
        if spec.values is not None:
            value = self.evaluate(spec.values, spec.path + ("values",))
            if value is not None and value != []:
                if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                    self.add("SRG112", f"layer set {spec.name}: `{spec.values.text}` must give a list of integers, "
                             f"got {value!r}"[:300], self.recipe.location(spec.path + ("values",)))
                    return ()
                indices, origin = list(value), f"from `{spec.values.text}`"
                if spec.offset is not None:
                    shift = self._int(spec.offset, spec.path + ("offset",), f"layer set {spec.name} offset")
                    if shift is None:
                        return ()
                    indices = [i + shift for i in indices]
                    origin += f" {'+' if shift >= 0 else '-'} {abs(shift)} (offset)"
            else:
                for j, e in enumerate(spec.default):
                    v = self._int(e, spec.path + ("default", j), f"layer set {spec.name} default")
                    if v is None:
                        return ()
                    indices.append(v)
                origin = f"default ({spec.values.text} is {value!r})"
        else:
            start = self._int(spec.start, spec.path + ("start",), f"layer set {spec.name} start")
            count = self._int(spec.count, spec.path + ("count",), f"layer set {spec.name} count")
            if start is None or count is None:
                return ()
            if not 0 <= count <= 4096:
                self.add("SRG317", f"layer set {spec.name}: count {count} is outside 0..4096", loc)
                return ()
            indices = list(range(start, start + count))
        if len(set(indices)) != len(indices):
            dup = sorted({i for i in indices if indices.count(i) > 1})
            self.add("SRG318", f"layer set {spec.name}: layer(s) {dup} listed more than once {origin}; the engine "
                     f"keeps each once, so {len(set(indices))} (not {len(indices)}) hidden states are produced", loc,
                     severity=WARNING)
        lo = self._int(spec.min, spec.path + ("min",), f"layer set {spec.name} min") if spec.min else 0
        hi = self._int(spec.max, spec.path + ("max",), f"layer set {spec.name} max") if spec.max else None
        model = self.target if spec.side == "target" else self.draft
        bad = [i for i in indices if (lo is not None and i < lo) or (hi is not None and i > hi)]
        if bad:
            self.add("SRG317", f"layer set {spec.name}: {spec.side} layer(s) {bad} outside {lo}..{hi} "
                     f"({spec.side} has {model.num_layers} layers) {origin}".rstrip(), loc,
                     f"{spec.side} config: {model.source}")
        out = tuple(sorted(set(indices)))
        if spec.expect_count is not None:
            want = self.evaluate(spec.expect_count, spec.path + ("expect_count",))
            if isinstance(want, int) and not isinstance(want, bool) and want != len(out):
                self.add("SRG335", f"layer set {spec.name}: {len(out)} layer(s) {list(out)} {origin} but "
                         f"`{spec.expect_count.text}` is {want}", loc)
        return out

    def expand_op(self, op: OpSpec) -> None:
        cond = op.condition
        if cond.when is not None:
            value = self.evaluate(cond.when, cond.path + ("when",))
            if value is None:
                return
            if value is not True:
                self.not_taken(op, f"`{cond.when.text}` is false ({self._values_of(cond.when)})")
                return
        unit = UNITS[op.kind]
        if unit.check is None or unit.check(self, op):  # the kind's own plan-time check (OpUnit.check)
            self.ops.extend(unit.expand(self, op))

    def not_taken(self, op: OpSpec, why: str) -> None:
        cond = op.condition
        reason = f"{why}" + (f": {cond.because}" if cond.because else "")
        where = self.recipe.location(cond.path + ("when",))
        role, m = getattr(op.args, "role", None), getattr(op.args, "map", None)
        attr, lset = getattr(op.args, "attr", None), getattr(op.args, "layers", None)
        what = role or m or attr or lset or ""
        if cond.otherwise == "error":
            code = cond.code or "SRG311"
            self.skipped.append(Skipped(op.index, op.kind, reason, code, ERROR, role, m, attr, lset))
            self.add(code, f"{op.kind} {what} is required but not possible: {reason}", where)
        elif cond.otherwise == "warn":
            code = cond.code or "SRG312"
            self.skipped.append(Skipped(op.index, op.kind, reason, code, WARNING, role, m, attr, lset))
            self.add(code, f"{op.kind} {what} skipped: {reason}", where, severity=WARNING)
        else:
            code = cond.code or "SRG320"
            self.skipped.append(Skipped(op.index, op.kind, reason, code, INFO, role, m, attr, lset))

    def check_contradictions(self) -> None:
        """Two operations in the plan that decide the same thing (the same `DECIDES` subject and key:
        the module of one draft role and layer, the KV cache of one draft layer, ...) must agree, and
        an operation is given once. A contradiction (`share_module` and `keep` of input_embeddings,
        share_kv of one draft layer from two target layers) is SRG125, an exact duplicate SRG126: the
        plan would list both, and which one the applier performed last would decide silently. Read
        from each op kind's own declaration (surgery/ops/base.py `DECIDES`), after `when:`, so steps
        whose conditions exclude each other (keep under pp > 1, share under pp 1) never meet. Said once
        per pair of steps, at the later step, naming both steps' places."""
        def overlap(k1: tuple, k2: tuple) -> bool:
            return all(a is None or b is None or a == b for a, b in zip(k1, k2))

        seen: dict[str, list[Operation]] = {}  # per subject, the ops so far
        exact: dict[tuple, Operation] = {}  # (subject, key) -> its first op
        wild: dict[str, list[Operation]] = {}  # per subject, the ops with a None key field
        pairs: dict[tuple[int, int, str], list[tuple[Operation, Operation]]] = {}
        for op in self.ops:
            subject, key = op.decision()
            if None in key:  # few: one per step at most; compared with every op of the subject so far
                earlier = [o for o in seen.get(subject, ()) if overlap(o.decision()[1], key)]
                wild.setdefault(subject, []).append(op)
            else:
                earlier = [exact[(subject, key)]] if (subject, key) in exact else []
                earlier += [o for o in wild.get(subject, ()) if overlap(o.decision()[1], key)]
            for other in earlier:
                code = "SRG126" if other.content() == op.content() else "SRG125"
                pairs.setdefault((other.step, op.step, code), []).append((other, op))
            exact.setdefault((subject, key), op)
            seen.setdefault(subject, []).append(op)
        for (a_step, b_step, code), found in pairs.items():
            self.report_contradiction(code, a_step, b_step, found)

    def _step_place(self, step: int) -> str:
        loc = self.recipe.location(self.recipe.ops[step].path[:-1])  # the step's `- kind:` line
        return f"{loc.file or '<recipe>'}:{loc.line}" if loc.line is not None else str(loc)

    def report_contradiction(self, code: str, a_step: int, b_step: int, found: list) -> None:
        a, b = found[0]
        subject, keys = b.DECIDES
        shown = list(dict.fromkeys(", ".join(f"{k} {v}" for k, v in zip(keys, o.decision()[1]) if v is not None)
                                   for _, o in found))
        listed = "; ".join(shown[:3]) + (f"; ... {len(shown)} in all" if len(shown) > 3 else "")
        what = f"{subject} ({listed or 'one per plan'})"
        where = self.recipe.location(self.recipe.ops[b_step].path[:-1])

        def says(o) -> str:
            return o.kind + "".join(f" {k}={v}" for k, v in o.content()[1:] if v is not None)

        if a_step == b_step:
            one = f"step {a_step} ({self._step_place(a_step)})"
            text = (f"{one} gives {says(b)} for {what} twice" if code == "SRG126" else
                    f"{one} decides {what} two ways: {says(a)} vs {says(b)}")
        else:
            both = f"step {a_step} ({self._step_place(a_step)}) and step {b_step} ({self._step_place(b_step)})"
            text = (f"{both} both give {says(b)} for {what}" if code == "SRG126" else
                    f"{both} decide {what} differently: {says(a)} vs {says(b)}")
        self.add(code, text, where)

    def check_engine_refusals(self) -> None:
        """Operations the plan's engine declares it cannot perform (surgery/ops/ registry), said at
        plan time, once per recipe step: apply / engine start will stop on them (SRG322) unless the
        step says `otherwise: skip | warn` or the user opts out of strictness."""
        seen: set[int] = set()
        for op in self.ops:
            reason = UNITS[op.op].refusal(self.runtime.engine)
            if reason is None or op.step in seen:
                continue
            seen.add(op.step)
            count = sum(1 for o in self.ops if o.step == op.step)
            step = self.recipe.ops[op.step]
            where = self.recipe.location(step.path)
            what = f"{count} {op.op} operation{'s' if count > 1 else ''} of step {op.step}"
            if self.said_natively(op, what, where):
                continue
            if op.otherwise in ("skip", "warn"):
                self.add("SRG321", f"{what}: {self.runtime.engine} cannot perform them ({reason}); "
                         f"`otherwise: {op.otherwise}` lets it go without", where,
                         severity="info" if op.otherwise == "skip" else "warning")
            else:
                self.add("SRG325", f"{what}: the {self.runtime.engine} engine cannot perform them ({reason}); "
                         "apply will stop with SRG322", where)

    def said_natively(self, op, what: str, where) -> bool:
        """A step the engine wires by itself (surgery/engine/native.py): SGLang's FROZEN_KV_MTP binds each
        Gemma 4 assistant layer to the target's KV. Same map as the plan: a note (SRG870); another: an error
        (SRG871). Either replaces "cannot perform" (SRG325)."""
        if self.runtime.engine != "sglang" or op.op != "share_kv":
            return False
        native = sglang_kv_map(self.runtime.engine_version, self.draft, self.target)
        if native is None:
            return False
        theirs, version, at = native
        ours = {o.draft_layer: o.target_layer for o in self.ops if o.step == op.step}
        pairs = ", ".join(f"{d}->{t}" for d, t in sorted(theirs.items()))
        if ours == theirs:
            self.add("SRG870", f"{what}: SGLang {version} wires them itself, the same map ({pairs}; FROZEN_KV_MTP, "
                     f"{at.removeprefix('sglang/')}); served by stock SGLang, that binding is the plan's. surgery has no SGLang "
                     "performer for share_kv: `surgery apply --engine sglang` stops on it (SRG322) unless the step "
                     "says `otherwise: skip`", where, severity=INFO)
        else:
            planned = ", ".join(f"{d}->{t}" for d, t in sorted(ours.items()))
            self.add("SRG871", f"{what}: SGLang {version} binds the assistant's layers itself ({pairs}; FROZEN_KV_MTP, "
                     f"{at.removeprefix('sglang/')}), not as the recipe plans ({planned}): served by SGLang, the "
                     "assistant reads other target layers' KV than it was paired with", where)
        return True

    def check_positional(self) -> None:
        d, t = self.draft, self.target
        for fact in ("rope_theta", "max_position_embeddings"):
            dv, tv = d[fact], t[fact]
            if dv is not None and tv is not None and dv != tv:
                if fact == "max_position_embeddings" and isinstance(dv, (int, float)) and isinstance(tv, (int, float)) \
                        and dv > tv:
                    continue  # a draft longer than its target covers every position the target serves
                self.add("SRG330", f"draft {fact}={dv!r} differs from target {fact}={tv!r}",
                         Location(d.source, key_path=d.key_prefix + fact))


def resolve(recipe: Recipe, draft: ModelFacts, target: ModelFacts, runtime: Runtime | None = None) -> Plan:
    return _Resolver(recipe, draft, target, runtime or Runtime()).run()


_ABSENT = object()


def _stated(raw, dotted: str):
    """The value config.json states at `dotted` (`text_config.num_kv_shared_layers`), or _ABSENT: SRG208 says
    "not from config.json" only when the file does not state the key (issue 66: a stated 0 replaced by the
    class's __post_init__ is the class's value, but the file did state one)."""
    node = raw
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node
