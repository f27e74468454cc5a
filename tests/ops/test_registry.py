"""The operation registry (surgery/ops/registry.py): every (op kind x engine) pair has a performer
or is declared not applicable with a reason, never neither and never both; and no performer
ignores a field of its spec (change the field: the prepared result changes, or the performer
refuses, from a base the performer prepares)."""
from __future__ import annotations

import dataclasses
import types

import pytest

torch = pytest.importorskip("torch")

from surgery.applier.core import prepare_op, prepare_plan  # noqa: E402
from surgery.text.diagnostics import SurgeryError  # noqa: E402
from surgery.engine.cards import ENGINES  # noqa: E402
from surgery.live.hf import HFContext, record_missing_keys  # noqa: E402
from surgery.live.prepared import NotApplicable  # noqa: E402
from surgery.live.sglang import SGLangContext  # noqa: E402
from surgery.live.vllm import VLLMContext  # noqa: E402
from surgery.text.records import Record  # noqa: E402
from surgery.ops.registry import UNITS, implemented, performer, performer_module, register  # noqa: E402
from surgery.ops.capture_hidden_states import CaptureHiddenStates  # noqa: E402
from surgery.ops.copy_attrs import CopyAttr  # noqa: E402
from surgery.ops.keep import Keep  # noqa: E402
from surgery.ops.share_buffer import ShareBuffer  # noqa: E402
from surgery.ops.share_kv import ShareKV  # noqa: E402
from surgery.ops.share_module import ShareModule  # noqa: E402


# ------------------------------------------------------------------------------ registry
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("kind", sorted(UNITS))
def test_every_kind_is_implemented_or_declared_for_every_engine(kind, engine):
    unit = UNITS[kind]
    refused = unit.refusal(engine)
    assert implemented(engine, kind) != (refused is not None), (
        f"{kind} x {engine}: implemented={implemented(engine, kind)}, declared refusal={refused!r}")
    if refused is not None:
        assert len(refused) > 20  # a reason a user can act on, not a placeholder


def test_every_kind_is_implemented_or_declared_for_every_engine_by_its_files(kind, engine):
    """`implemented` is the performer file itself: a declared refusal has none, a performer is one."""
    import importlib.util

    unit = UNITS[kind]
    has_file = importlib.util.find_spec(performer_module(unit, engine)) is not None
    assert has_file == implemented(engine, kind)
    if has_file:
        assert callable(performer(kind, engine).prepare)


test_every_kind_is_implemented_or_declared_for_every_engine_by_its_files = pytest.mark.parametrize(
    "engine", ENGINES)(pytest.mark.parametrize("kind", sorted(UNITS))(
        test_every_kind_is_implemented_or_declared_for_every_engine_by_its_files))


def test_registration_refuses_a_unit_that_declares_wrongly():
    """Checked when registered: a refusal for an engine that has a performer, or a unit with
    neither, is refused with what is wrong (no registry that lists a unit the engines ignore)."""
    share_kv = UNITS["share_kv"]
    both = dataclasses.replace(share_kv, spec=type("S", (), {"kind": "share_kv"}), refused_by={"hf": "x" * 30})
    with pytest.raises(ValueError, match="registered twice"):
        register(both)
    fresh = dataclasses.replace(share_kv, kind="brand_new",
                                spec=type("S", (), {"kind": "brand_new"}), refused_by={})
    with pytest.raises(ValueError, match="neither a performer"):
        register(fresh)
    assert "brand_new" not in UNITS


@pytest.mark.parametrize("decides", [("", ()), ("the KV cache a draft layer reads", ("no_such_field",)),
                                     ("the KV cache a draft layer reads", ("map",))])
def test_registration_refuses_a_spec_that_does_not_say_what_it_decides(decides):
    """Issue 48: the plan's contradiction check (SRG125 / SRG126) reads what each kind decides from
    its spec's DECIDES; a kind that declares none, or keys on a field it lacks or on a bookkeeping
    field (`map`, a name only), is refused when registered, not skipped by the check."""
    spec = dataclasses.make_dataclass("S", [], bases=(ShareKV,), init=False, repr=False, eq=False,  # a record
                                      namespace={"kind": "decides_test", "DECIDES": decides})
    unit = dataclasses.replace(UNITS["share_kv"], kind="decides_test", spec=spec,
                               refused_by={e: "a refusal for the test" for e in ENGINES})
    with pytest.raises(ValueError, match="DECIDES"):
        register(unit)
    assert "decides_test" not in UNITS


def test_every_recipe_op_has_a_unit_and_every_unit_a_spec():
    """The op list is the registry's; the recipe schema names the same op keys (one list, checked)."""
    from surgery.resources import load_schema

    schema = load_schema("recipe.schema.json")
    keys = set(schema["$defs"]["op"]["properties"])  # an op is a mapping with exactly one of these keys
    assert keys == set(UNITS) == {u.kind for u in UNITS.values()}
    for unit in UNITS.values():
        # immutable: a record (surgery/text/records.py) whose assignment raises FrozenInstanceError, not overridden
        assert dataclasses.is_dataclass(unit.spec) and issubclass(unit.spec, Record)
        assert unit.spec.__setattr__ is Record.__setattr__ and unit.step_class.__setattr__ is Record.__setattr__
        assert unit.spec.kind == unit.kind


def test_declared_refusal_is_an_error_unless_the_step_allows_it():
    """Strict by default: an op the engine declares it cannot perform is SRG322 (error); with
    `otherwise: skip` it is SRG321 (info), with the opt-out SRG321 (warning)."""
    from surgery import Runtime, load_recipe, resolve
    from testpaths import E2B, E2B_ASSISTANT
    from surgery.facts import read_facts

    plan = resolve(load_recipe("gemma4-mtp"), read_facts(E2B_ASSISTANT), read_facts(E2B), Runtime(engine="hf"))
    op = CopyAttr(id="copy_attrs:kv_source:_k_scale:0<-13", step=1, map="kv_source", draft_layer=0, target_layer=13,
                  attr="_k_scale", mode="assign")
    strict_plan = dataclasses.replace(plan, operations=(op,))
    adapter = HFContext()
    adapter.static_checks = lambda *a: []
    with pytest.raises(SurgeryError) as exc:
        prepare_plan(strict_plan, None, None, adapter)
    assert [d.code for d in exc.value.diagnostics] == ["SRG322"]
    _, na = prepare_plan(strict_plan, None, None, adapter, strict=False)
    assert [(d.code, d.severity) for d in na] == [("SRG321", "warning")]
    allowed = dataclasses.replace(plan, operations=(dataclasses.replace(op, otherwise="skip"),))
    _, na = prepare_plan(allowed, None, None, adapter)
    assert [(d.code, d.severity) for d in na] == [("SRG321", "info")]


# ------------------------------------------------------------------------------ stand-in models
class VAttention(torch.nn.Module):
    """The attributes of vLLM's Attention that the adapter reads."""

    def __init__(self, name, k_scale):
        super().__init__()
        self.layer_name, self.num_kv_heads, self.head_size, self.sliding_window = name, 1, 8, None
        self.attn_type, self.kv_cache_dtype, self.kv_sharing_target_layer_name = "decoder", "fp8", None
        self.register_buffer("_k_scale", torch.tensor(k_scale))
        self.register_buffer("_v_scale", torch.tensor(2 * k_scale))
        self._k_scale_float, self._v_scale_float = float(k_scale), 2.0 * k_scale


class AuxHolder(torch.nn.Module):
    """vLLM's EagleModelMixin contract: `_set_aux_hidden_state_layers` sorts and de-duplicates."""

    aux_hidden_state_layers: tuple = ()

    def _set_aux_hidden_state_layers(self, layers):
        self.aux_hidden_state_layers = tuple(sorted(set(layers)))


def _vllm_model(prefix, n, scale, *, buffer=None, shared_heads=()):
    root = torch.nn.Module()
    root.model = AuxHolder()
    layers = torch.nn.ModuleList()
    for i in range(n):
        layer = torch.nn.Module()
        layer.self_attn = torch.nn.Module()
        layer.self_attn.attn = VAttention(f"{prefix}.layers.{i}.self_attn.attn", scale * (i + 1))
        if i in shared_heads:
            layer.shared_head = torch.nn.Module()
            layer.shared_head.head = torch.nn.Linear(4, 6, bias=False)
        if buffer is not None:
            layer.indexer = torch.nn.Module()
            layer.indexer.topk_indices_buffer = buffer
        layers.append(layer)
    root.model.layers = layers
    root.model.embed_tokens = torch.nn.Embedding(6, 4)
    root.lm_head = torch.nn.Linear(4, 6, bias=False)
    if buffer is not None:
        root.model.topk_indices_buffer = buffer
    return root


def vllm_pair():
    torch.manual_seed(0)
    target = _vllm_model("model", 4, 0.5, buffer=torch.zeros(3))
    draft = _vllm_model("draft_model", 4, 1.0, buffer=torch.ones(3), shared_heads=(2, 3))
    draft.has_own_embed_tokens, draft.has_own_lm_head = True, False
    draft.model.layers[0].indexer.topk_indices_buffer = torch.full((3,), 7.0)  # only this module keeps its own
    return draft, target


class HAttention(torch.nn.Module):
    def __init__(self, shared, layer_type):
        super().__init__()
        self.is_kv_shared_layer, self.head_dim, self.layer_type = shared, 8, layer_type


def _hf_model(n, shared_from):
    root = torch.nn.Module()
    root.model = torch.nn.Module()
    layers = torch.nn.ModuleList()
    for i in range(n):
        layer = torch.nn.Module()
        layer.self_attn = HAttention(i >= shared_from, "sliding_attention")
        layers.append(layer)
    root.model.layers = layers
    root.model.embed_tokens = torch.nn.Embedding(6, 4)
    root.model.norm = torch.nn.LayerNorm(4)
    root.lm_head = torch.nn.Linear(4, 6, bias=False)
    root.config = types.SimpleNamespace(get_text_config=lambda: types.SimpleNamespace(num_kv_shared_layers=n - shared_from))
    return root


def hf_pair():
    torch.manual_seed(0)
    draft, target = _hf_model(4, 0), _hf_model(4, 4)
    record_missing_keys(draft, {"lm_head.weight"})
    return draft, target


def _sglang_model(n):
    """SGLang's Llama shape: model.layers[i].self_attn.attn, model.embed_tokens, lm_head, model.norm,
    and on the target's text model the capture list `layers_to_capture`."""
    root = torch.nn.Module()
    root.model = torch.nn.Module()
    layers = torch.nn.ModuleList()
    for _ in range(n):
        layer = torch.nn.Module()
        layer.self_attn = torch.nn.Module()
        layer.self_attn.attn = torch.nn.Module()
        layers.append(layer)
    root.model.layers = layers
    root.model.embed_tokens = torch.nn.Embedding(6, 4)
    root.model.norm = torch.nn.LayerNorm(4)
    root.model.layers_to_capture = []
    root.lm_head = torch.nn.Linear(4, 6, bias=False)
    root.config = types.SimpleNamespace(num_hidden_layers=n)
    return root


def sglang_pair():
    torch.manual_seed(0)
    return _sglang_model(4), _sglang_model(4)


# one concrete spec per (kind, engine), and the other values each field can take
SPECS = {
    "share_kv": ShareKV(id="x", step=0, map="m", draft_layer=1, target_layer=2),
    "copy_attrs": CopyAttr(id="x", step=0, map="m", draft_layer=1, target_layer=2, attr="_k_scale", mode="assign"),
    "share_module": ShareModule(id="x", step=0, role="input_embeddings"),
    "keep": Keep(id="x", step=0, role="input_embeddings"),
    "capture_hidden_states": CaptureHiddenStates(id="x", step=0, layers=(0, 2), layer_set="aux"),
    "share_buffer": ShareBuffer(id="x", step=0, attr="topk_indices_buffer", scope="all_modules"),
}
ALTERNATIVES = {
    "draft_layer": [0, 3], "target_layer": [0, 3], "attr": ["_v_scale", "_k_scale_float"],
    "mode": ["clone_keep_registration", "copy_inplace", "assign"],
    "role": ["lm_head", "final_norm", "mtp_shared_head"], "layer": [2, 3],
    "if_draft_has_own": ["share", "share_if_identical", "keep"], "tied_to": ["draft_embeddings", "none"],
    "must_exist": [True], "layers": [(1,), (0, 1, 3)], "scope": ["model", "all_modules"],
}
PAIRS = {"hf": hf_pair, "vllm": vllm_pair, "sglang": sglang_pair}
CONTEXTS = {"vllm": lambda: VLLMContext(is_attention=lambda m: isinstance(m, VAttention)), "hf": HFContext,
            "sglang": lambda: SGLangContext(loaded_names=frozenset({"model.embed_tokens.weight"}))}


def _val(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", tuple(v.detach().flatten().tolist()), str(v.dtype))
    if isinstance(v, (str, int, float, bool, tuple, type(None))):
        return v
    return ("object", id(v))


def outcome(engine, spec, draft, target):
    """What the performer would do with `spec`: its mutations (what, where, to which value), its
    load-time decision and its checks' names; or the refusal."""
    context = CONTEXTS[engine]()
    try:
        p = prepare_op(spec, draft, target, context)
    except (SurgeryError, NotApplicable) as exc:
        return ("refused", type(exc).__name__)
    muts = tuple((type(m).__name__, id(getattr(m, "obj", getattr(m, "holder", getattr(m, "tensor", None)))),
                  getattr(m, "name", None), getattr(m, "kind", None),
                  _val(getattr(m, "value", getattr(m, "layers", getattr(m, "source", None))))) for m in p.mutations)
    names = []
    for make in p.checks:
        try:
            names.append(make().name)
        except Exception as exc:  # noqa: BLE001 - a check needing the applied state
            names.append(f"raised {type(exc).__name__}")
    return ("prepared", muts, p.decision, tuple(names))


CASES = [(kind, engine, f.name) for kind in sorted(UNITS) for engine in ENGINES if implemented(engine, kind)
         for f in dataclasses.fields(UNITS[kind].spec) if f.name not in UNITS[kind].spec.BOOKKEEPING]


@pytest.mark.parametrize("kind, engine, field", CASES)
def test_no_spec_field_is_ignored(kind, engine, field):
    """From a base the performer prepares (never a refused one: a refused base would make every
    change look "noticed"), changing the field changes what is prepared or refuses it."""
    spec = SPECS[kind]
    if kind in ("share_module", "keep") and field == "layer" and engine == "vllm":
        spec = dataclasses.replace(spec, role="mtp_shared_head", layer=3)  # a per-layer role on vLLM
    if kind == "capture_hidden_states" and engine == "sglang":
        spec = dataclasses.replace(spec, layers=(1, 2))  # SGLang cannot capture id 0 (SRG362)
    draft, target = PAIRS[engine]()
    base = outcome(engine, spec, draft, target)
    assert base[0] == "prepared", f"{engine} performer refuses the base spec of {kind}: {base}"
    current = getattr(spec, field)
    others = [v for v in ALTERNATIVES[field] if v != current]
    assert others, f"no alternative value for {kind}.{field}"
    changed = []
    for value in others:
        got = outcome(engine, dataclasses.replace(spec, **{field: value}), draft, target)
        changed.append(got != base)
    assert any(changed), f"{engine} performer ignores {kind}.{field}: {base}"


def test_refusal_is_said_at_plan_time():
    """`surgery validate --engine hf` on EAGLE-3: the HF engine declares it cannot capture hidden
    states; the plan says so once for the step (SRG325) before anything is loaded."""
    from surgery import Runtime, load_recipe, read_facts, resolve
    from testpaths import CONFIGS

    def plan(engine):
        return resolve(load_recipe("eagle3"), read_facts(CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json"),
                       read_facts(CONFIGS / "Llama-3.1-8B-Instruct.json"), Runtime(engine=engine))

    hf = [d for d in plan("hf").diagnostics if d.code == "SRG325"]
    assert len(hf) == 1 and "capture_hidden_states" in hf[0].message and hf[0].location.line
    assert not [d for d in plan("vllm").diagnostics if d.code in ("SRG325", "SRG321")]


def test_surgery_apply_is_the_function_whatever_is_imported():
    """`surgery.apply` is the library function; the engine-neutral package is `surgery.applier`, so
    importing it cannot rebind the name (the old package `surgery.apply` did, and needed a module
    class with `__call__` to hide it)."""
    import inspect

    import surgery
    import surgery.applier  # noqa: F401
    from surgery.applier import apply_plan

    assert inspect.isfunction(surgery.apply) and surgery.apply.__module__ == "surgery"
    assert apply_plan.__module__ == "surgery.applier.core"


def test_every_op_has_one_name_its_recipe_key():
    """Issue 43: one name per op, equal to its recipe key (copy_attrs was also `copy_attr` in plans and ids):
    the unit has no second name to differ (no `recipe_key`), the registry is keyed by it once, and the
    spec, the folder and the performers' module names all say it."""
    assert not hasattr(UNITS["share_kv"], "recipe_key")
    for kind, unit in UNITS.items():
        assert kind == unit.kind == unit.spec.kind, unit
        assert performer_module(unit, "vllm") == f"surgery.ops.{kind}.vllm"
