"""What the plugin keeps on a live vLLM object between its hooks: one typed `PluginState`.

The hooks run at different moments of one engine start (draft loaded, KV caches bound, weights
reloaded, warmed up) and the inspection API reads the results later; the proposer object is the only
thing they all see. So the plugin hangs one attribute, `__surgery_state__`, on it holding a
`PluginState`: the fields are typed and named in one place (a misspelt name is an AttributeError,
not a silent None), and the engine context is built once per proposer and shared by every stage.
Two other vLLM objects carry a state of their own because the proposer is not in reach there: the
draft model under `load_format="dummy"` (`dummy_load`, set before the proposer's load hook runs) and
the engine core's scheduler (`guard`, surgery/vllm/guard.py). The SGLang side keeps its record the
same way (surgery/sglang/live_apply.py `Applied`).

Every live change the plugin makes outside the plan's own apply (the calculate_kv_scales fix and the
refresh after a weight reload, surgery/vllm/kv_scales.py; the dummy-load flags) goes through the
reversible mutation layer (surgery/live/mutations.py) with `change`, so `rollback` restores every
attribute the plugin touched.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..live.mutations import Mutation
from ..live.vllm import VLLMContext

ATTR = "__surgery_state__"  # the one attribute the plugin sets on a vLLM object


@dataclass
class PluginState:
    """The plugin's record on one vLLM object, field groups in hook order."""

    # the wrapped load_model's argument (surgery/vllm/hooks.py), before any callback runs
    target_model: Any = None
    # the engine context every stage prepares and verifies with, built once (at load, or by engine_context)
    context: VLLMContext | None = None
    # after the draft is loaded: the plan applied, its apply / verify reports, what was checked against
    plan: Any = None
    report: Any = None  # the ApplyReport
    verification: Any = None  # the VerifyReport at load
    target_lm: Any = None  # the target's language model the plan was applied to
    hint_problems: list = field(default_factory=list)  # SRG324
    load_info: dict | None = None  # load format, what "has own weights" was answered from
    load_values: dict | None = None  # the copied values at load, which the warmed stage compares with
    kv_scales_fix: dict | None = None  # the calculate_kv_scales fix (SRG517), None when not selected
    # after the KV caches are bound
    kv_checks: list | None = None
    # after a weight reload
    reloaded: bool = False
    # after the warm-up: the checks run again (dict: ok, checks, problems, kv_scales_fix | skipped)
    warmed: dict | None = None
    # audit mode (surgery/vllm/audit.py): the Audit and the target model it observes
    audit: Any = None
    audit_target: Any = None
    # on the draft model: the has-own flags the dummy-load hook set
    dummy_load: dict | None = None
    # on the scheduler: the acceptance guard's GuardRun (surgery/vllm/guard.py)
    guard: Any = None
    # the plugin's live changes besides the plan's report, oldest first (undone newest first)
    mutations: list[Mutation] = field(default_factory=list, repr=False)

    # ------------------------------------------------------------------ one method per hook stage
    # Every field is written through these, in hook order (tests/test_plugin_state.py checks no other
    # module assigns one), so what each stage leaves behind is read here, not searched for.
    def load_started(self, target_model: Any) -> None:
        """The wrapped load_model was entered (before any callback): the target it was given."""
        self.target_model = target_model

    def dummy_loaded(self, flags: dict) -> None:
        """On the draft model under `load_format="dummy"`: the has-own flags set (through `change`)."""
        self.dummy_load = flags

    def loaded(self, plan: Any, report: Any, verification: Any, target_lm: Any, hint_problems: list,
               load_info: dict, load_values: dict | None, context: VLLMContext | None = None) -> None:
        """Record the draft-loaded stage (`context`: the engine context the plan was applied with, built at load,
        surgery/vllm/wiring.py `at_load`)."""
        self.plan, self.report, self.verification, self.target_lm = plan, report, verification, target_lm
        self.hint_problems, self.load_info, self.load_values = list(hint_problems), load_info, load_values
        if context is not None:
            self.context = context

    def kv_scales_fixed(self, fix: dict | None) -> None:
        """The calculate_kv_scales fix (SRG517): what was stopped at load, recopied at warm-up."""
        self.kv_scales_fix = fix

    def kv_bound(self, checks: list) -> None:
        """Record the KV-cache-bound stage's checks."""
        self.kv_checks = checks

    def weights_reloaded(self) -> None:
        """vLLM reloaded the weights (the copied values were refreshed)."""
        self.reloaded = True

    def warmed_up(self, record: dict) -> None:
        """Record the warmed-up stage."""
        self.warmed = record

    def audit_started(self, audit: Any, target_model: Any) -> None:
        """Audit mode: the Audit and the target model it observes."""
        self.audit, self.audit_target = audit, target_model

    def guard_started(self, run: Any) -> None:
        """On the scheduler: the acceptance guard's GuardRun, built once at its __init__."""
        self.guard = run

    # ------------------------------------------------------------------ the engine context
    def engine_context(self, proposer: Any) -> VLLMContext:
        """The proposer's engine context, built the first time it is asked for (at load) and kept: the
        static forward context, the speculative method and the load format do not change after load."""
        if self.context is None:
            self.context = VLLMContext.of(getattr(proposer, "vllm_config", None),
                                          dummy_load=bool((self.load_info or {}).get("dummy")))
        return self.context

    # ------------------------------------------------------------------ reversible live changes
    def change(self, mutations: list[Mutation]) -> None:
        """Apply live changes through the mutation layer and keep them for `rollback`."""
        for m in mutations:
            m.apply()
            self.mutations.append(m)

    def rollback(self) -> None:
        """Undo every live change recorded here: the plugin's own (newest first), then the plan's."""
        for m in reversed(self.mutations):
            m.undo()
        self.mutations.clear()
        if self.report is not None:
            self.report.undo()


def get(obj: Any) -> PluginState | None:
    """The state on `obj`, None when the plugin has recorded nothing there (or `obj` is None)."""
    found = getattr(obj, ATTR, None) if obj is not None else None
    return found if isinstance(found, PluginState) else None


def of(obj: Any) -> PluginState:
    """The state on `obj`, created empty on first use."""
    found = get(obj)
    if found is None:
        found = PluginState()
        setattr(obj, ATTR, found)
    return found


def rollback(obj: Any) -> None:
    """Undo every live change the plugin made through `obj`'s state and, for a proposer, through its
    draft model's (the dummy-load flags)."""
    for holder in (obj, getattr(obj, "model", None)):
        st = get(holder)
        if st is not None:
            st.rollback()
