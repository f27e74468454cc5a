"""SRG680: a head whose ids include L, the last slot, where vLLM and transformers hand over different
states (TorchSpec#87). vLLM's id L is the residual stream after the last decoder layer, before the
final norm; transformers' output_hidden_states[L] is after it. A head trained from transformers'
hidden states (EAGLE, SpecForge, ModelOpt) and served by vLLM reads an unnormalised state in the slot
it learned as normalised: acceptance falls, output stays correct, nothing is logged. Data:
surgery/data/engine_rules.yaml `last_slot`."""
from __future__ import annotations

from ..text.diagnostics import INFO, WARNING, Diagnostic, Location, diag
from ..text.words import a_count
from .inherit import engine_rules
from ..formats import format_of
from ..formats.conventions import trained_on


def last_slot_check(plan, draft, target, producer: str | None = None) -> list[Diagnostic]:
    """Fires when slot L is one the head was trained on (its ids translated from its producer's
    convention, surgery/formats) or one the engine reads. A SpecForge head written [.., L-1] (the
    output of the last layer) was trained on transformers' post-norm entry L: translated to vLLM's
    convention it reads id L, which vLLM fills pre-norm."""
    if plan.runtime.engine != "vllm":
        return []
    L = target.num_layers
    read = {i for op in plan.ops("capture_hidden_states") for i in (op.layers or ())}
    fmt = format_of(draft, producer)
    learned = trained_on(fmt, L) if read else None
    if L not in read and not (learned and L in learned[0]):
        return []
    rules = engine_rules()["last_slot"]
    who = fmt.producer
    trained = (rules["trained_from"].get(who) or {}) if who else {}
    where = Location(draft.source, key_path=fmt.where_written or "eagle_aux_hidden_state_layer_ids")
    state = {"pre_norm": "before the final norm", "post_norm": "after the final norm"}
    served = f"vLLM fills slot {L} (of {a_count(L, 'layer')} target) with the residual stream {state[rules['vllm']]}"
    if trained.get("from") == "vllm":
        return []
    if trained.get("from") == "hf":
        return [diag("SRG680", f"{served}; the head's producer {who} trains on transformers' hidden states, whose "
                     f"entry {L} is {state[rules['hf']]} ({trained['source']}), and slot {L} is among the layers it "
                     f"learned ({learned[1] if learned else 'the ids vLLM reads'}): served in that slot, it reads "
                     "another state than it was trained on", where,
                     "retrain with ids below L, or serve on an engine whose last slot is post-norm", severity=WARNING)]
    return [diag("SRG680", f"{served}; transformers' entry {L} is {state[rules['hf']]}. Which one this head was "
                 "trained on depends on its producer, not known from the file (pass --producer: a head trained "
                 "from transformers' hidden states reads another state in that slot)", where, severity=INFO)]
