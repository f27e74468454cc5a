"""Engine cards as typed models: what `surgery/data/engines/<engine>.yaml` may hold, one immutable
record per section (surgery/text/records.py says why not a frozen dataclass); their JSON Schema is
surgery/engine/card_schema.py.

Why typed: code reads a card through attributes (`card("vllm").limits.cuda_dtypes`), so a section
no model declares cannot be read anywhere. A key the models do not know is therefore refused when
the card is loaded (a card entry no code reads is a silent gap), and so is a missing required key
or a value of the wrong type, each with the card file and the key path. The loader is plain Python
(no jsonschema: `surgery validate` reads cards at cold start); `schemas/engine-card.schema.json`
is generated from the same models (surgery/engine/card_schema.py) and checked against the shipped
cards by tests/test_engine_card.py.
"""
from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import MISSING, field, fields, is_dataclass
from typing import Any, ClassVar, Literal, Union, get_args, get_origin, get_type_hints

from ..text.records import Record, record

Paths = tuple[str, ...]


class CardError(ValueError):
    """A card that does not fit the models: a fault in the shipped data, named by file and key path."""


def doc(text: str, default: Any = MISSING, factory: Any = MISSING) -> Any:
    """A card field with its description (the schema's `description`)."""
    return field(default=default, default_factory=factory, metadata={"doc": text})


def empty() -> Mapping:
    return types.MappingProxyType({})




@record
class RolePaths(Record):
    """One role's candidate module paths on each side, tried in order (the first that exists on the
    live model is used; `{i}` is filled with the op's layer). A plain list in the card is both sides'."""

    draft: Paths = doc("candidate paths on the draft model")
    target: Paths = doc("candidate paths on the target model")
    one_module_for_every_layer: bool = doc("the engine keeps this per-layer role in one module whatever the "
                                           "layer; a layer given for it means nothing here", False)
    SHORT_FORM: ClassVar = Paths

    @classmethod
    def from_short(cls, paths: Paths) -> RolePaths:
        return cls(draft=paths, target=paths)

    def side(self, side: str) -> Paths:
        return getattr(self, side)

    def per_layer(self) -> bool:
        """Some side's paths hold `{i}`: the role has one module per layer."""
        return any("{i}" in c for c in self.draft + self.target)


@record
class Release(Record):
    """A release whose source was read against the card."""

    device: Literal["cpu", "cuda"] = doc("the device this release is for")
    torch: str = doc("the torch version the release pins")


@record
class ArchitectureKeep(Record):
    """Architecture names the engine keeps as they are."""

    startswith: Paths = doc("a name starting with one of these is kept", ())
    endswith: Paths = doc("a name ending with one of these is kept", ())


@record
class ArchitectureRewrite(Record):
    """How the engine renames a draft config's `architectures` for one method."""

    prefix: str = doc("put in front of a name that is not kept")
    keep: ArchitectureKeep = doc("names kept by their start or end", ArchitectureKeep())
    keep_names: Paths = doc("names kept as they are", ())


@record
class CaptureSpan(Record):
    """The aux ids one release's capture can return, and the release's own code that decides it."""

    ids: Literal["1..L-1", "0..L-1"] = doc("the vLLM-convention aux ids it captures (L: the target's layers)")
    source: str = doc("file:line in the release's source (under sglang/srt/) where this is decided")


@record
class Wiring(Record):
    """The engine's own wiring of a draft at load, with no recipe (SGLang)."""

    draft_load_points: tuple[tuple[str, str, str], ...] = doc(
        "(module, class, method) the hook wraps: where the draft's embedding and head are wired")
    head_always_replaced_for: Paths = doc("algorithms whose draft head is always the target's")
    head_never_touched_for: Paths = doc("algorithms whose draft embedding and head are never wired")
    aux_ids_read_from: str = doc("the dotted draft-config key the aux hidden-state ids are read from")
    aux_shift: Mapping[str, Literal["always", "first_id_is_1"]] = field(
        metadata={"doc": "target model type -> how the aux ids are shifted (`default` for every other type)",
                  "required_keys": ("default",)})
    capturable_ids: Mapping[str, CaptureSpan] = doc(
        "release -> the aux ids its capture can return (surgery/engine/capture.py judges a release)", factory=empty)
    eagle_draft_architectures: Mapping[str, str] = doc(
        "plain architecture -> the engine's EAGLE-1 class it is served as", factory=empty)


@record
class Limits(Record):
    """What the engine cannot do under some runtimes, measured on real engines."""

    speculative_pp_fails_on_devices: Paths = doc("devices where speculative decoding under pipeline "
                                                 "parallelism fails at start (SRG351)", ())
    pp_loses_per_layer_inputs: Paths = doc("target model types whose per-layer inputs are lost on later "
                                           "pipeline stages (SRG352)", ())
    speculative_fails_on_devices: Paths = doc("devices where a speculative engine cannot start (SRG360)", ())
    cuda_dtypes: Paths = doc("the dtypes a CUDA engine runs in, the default first (SRG367)", ())


@record
class EngineCard(Record):
    """Everything engine-specific that is not code: module paths per role, load-time flags, speculative
    methods, attention backends, the engine's own wiring, measured limits, the releases run."""

    layers: Paths = doc("candidate paths of the decoder layer list")
    attention: str = doc("the attention module's path inside a decoder layer")
    roles: Mapping[str, RolePaths] = doc("role -> its candidate module paths")
    release: str | None = doc("the pinned release the card was read off", None)
    releases: Mapping[str, Release] = doc("every release whose source was read against the card", factory=empty)
    has_own_flags: Mapping[str, str] = doc("role -> the attribute the engine sets while loading when the "
                                           "checkpoint brought the role's weights", factory=empty)
    loader_requires_all_weights: Paths = doc("methods whose draft loader refuses a checkpoint missing any "
                                             "weight", ())
    methods: Mapping[str, Paths] = doc("recipe `engine.vllm.method` hint -> the engine's methods that run it",
                                       factory=empty)
    draft_architecture_rewrite: Mapping[str, ArchitectureRewrite] = doc(
        "method -> how the engine renames the draft's architectures", factory=empty)
    attention_backends: Mapping[str, tuple[int, ...]] = doc("attention backend -> the head sizes it serves",
                                                            factory=empty)
    wiring: Wiring | None = doc("the engine's own draft wiring at load", None)
    limits: Limits = doc("what the engine cannot do under some runtimes", Limits())
    attention_facts: Mapping[str, str | None] = doc(
        "attention attribute that must agree between a draft layer and the target layer whose cache it reads "
        "-> its config fact (null: none)", factory=empty)
    ran_versions: Paths = doc("the releases the plugin was run on", ())


# ------------------------------------------------------------------ loading
def card_from_data(raw: Any, source: str) -> EngineCard:
    """The typed card from a parsed card file; CardError names `source` and the key path."""
    return build(EngineCard, raw, source, ())


def build(tp: Any, value: Any, source: str, path: tuple) -> Any:
    """`value` (parsed YAML) as type `tp`, checked all the way down."""
    if is_dataclass(tp):
        return build_dataclass(tp, value, source, path)
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        if value not in args:
            fail(source, path, f"{value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin in (Union, types.UnionType):
        return build_union(args, value, source, path)
    if origin is tuple:
        return build_tuple(args, value, source, path)
    if origin is Mapping:
        return build_mapping(args[1], value, source, path)
    if tp is bool and isinstance(value, bool) or tp in (str, int) and type(value) is tp:
        return value
    fail(source, path, f"expected {describe(tp)}, got {type(value).__name__} {value!r}")


def build_dataclass(cls: type, value: Any, source: str, path: tuple) -> Any:
    short = getattr(cls, "SHORT_FORM", None)
    if short is not None and not isinstance(value, dict):
        return cls.from_short(build(short, value, source, path))
    if not isinstance(value, dict):
        fail(source, path, f"expected a mapping ({cls.__name__}), got {type(value).__name__} {value!r}")
    hints, known = get_type_hints(cls), {f.name: f for f in fields(cls)}
    unknown = [k for k in value if k not in known]
    if unknown:
        fail(source, path + (unknown[0],), f"unknown key (a card entry no code reads); "
             f"{'.'.join(map(str, path)) or 'a card'} takes: {', '.join(known)}")
    missing = [n for n, f in known.items() if n not in value and f.default is MISSING
               and f.default_factory is MISSING]
    if missing:
        fail(source, path + (missing[0],), "missing required key")
    built = {k: build(hints[k], v, source, path + (k,)) for k, v in value.items()}
    for name, v in built.items():
        absent = [k for k in known[name].metadata.get("required_keys", ()) if k not in v]
        if absent:
            fail(source, path + (name, absent[0]), "missing required key")
    return cls(**built)


def build_union(args: tuple, value: Any, source: str, path: tuple) -> Any:
    if value is None and type(None) in args:
        return None
    options = [a for a in args if a is not type(None)]
    if len(options) == 1:
        return build(options[0], value, source, path)
    for option in options:
        try:
            return build(option, value, source, path)
        except CardError:
            continue
    fail(source, path, f"expected {' or '.join(map(describe, options))}, got {type(value).__name__} {value!r}")


def build_tuple(args: tuple, value: Any, source: str, path: tuple) -> tuple:
    if not isinstance(value, list):
        fail(source, path, f"expected a list, got {type(value).__name__} {value!r}")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(build(args[0], v, source, path + (i,)) for i, v in enumerate(value))
    if len(value) != len(args):
        fail(source, path, f"expected a list of {len(args)} items, got {len(value)}")
    return tuple(build(a, v, source, path + (i,)) for i, (a, v) in enumerate(zip(args, value)))


def build_mapping(item: Any, value: Any, source: str, path: tuple) -> Mapping:
    if not isinstance(value, dict):
        fail(source, path, f"expected a mapping, got {type(value).__name__} {value!r}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        fail(source, path + (bad[0],), f"a key must be a string, got {type(bad[0]).__name__}")
    return types.MappingProxyType({k: build(item, v, source, path + (k,)) for k, v in value.items()})


def fail(source: str, path: tuple, problem: str):
    raise CardError(f"engine card {source}: {'.'.join(map(str, path)) or '(top level)'}: {problem}")


def describe(tp: Any) -> str:
    if is_dataclass(tp):
        return f"a mapping ({tp.__name__})"
    origin = get_origin(tp)
    if origin is tuple:
        return "a list"
    if origin is Mapping:
        return "a mapping"
    if origin is Literal:
        return " or ".join(map(repr, get_args(tp)))
    return {str: "a string", int: "an integer", bool: "true or false", type(None): "null"}.get(tp, str(tp))
