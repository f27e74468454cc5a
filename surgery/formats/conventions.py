"""Aux-layer ids between conventions (formats.yaml `conventions`) and what each vLLM runner reads
(formats.yaml `runners`). vLLM's id i is the input of target layer i: 0 the embedding output, L the
final pre-norm state."""
from __future__ import annotations

import re

from ..text.diagnostics import fail
from .recognise import DraftFormat
from .table import conventions, runners


def default_ids(convention: str, num_layers: int) -> tuple[int, ...]:
    """The ids a producer trains on when it writes none, in its own convention."""
    return tuple(layer_expr(e, num_layers) for e in conventions()[convention]["default"])


TERM = re.compile(r"^\s*(?:(L)(?:\s*/\s*(\d+))?)?\s*([+-]?\s*\d+)?\s*$")


def layer_expr(text: str, num_layers: int) -> int:
    """`c`, `L+c`, `L/2+c` (floor division) with L the target's layer count: the data's spelling."""
    m = TERM.match(str(text))
    if not m or not (m.group(1) or m.group(3)):
        raise ValueError(f"formats.yaml: bad layer expression {text!r}")
    base = num_layers // int(m.group(2) or 1) if m.group(1) else 0
    return base + int((m.group(3) or "0").replace(" ", ""))


def shift_of(ids, convention: str) -> int:
    """What to add to `ids` (written in `convention`) to get vLLM's ids."""
    rule = conventions()[convention]
    first = rule.get("only_if_first_id")
    if first is not None and (not ids or ids[0] != first):
        return 0
    return rule["to_vllm"]


def to_vllm(ids, convention: str) -> tuple[int, ...]:
    shift = shift_of(ids, convention)
    return tuple(i + shift for i in ids)


def from_vllm(ids, convention: str, num_layers: int | None = None) -> tuple[int, ...]:
    """vLLM ids in `convention`; refused (SRG662) where the convention cannot name a layer (an
    output-of-layer convention has no id for the embedding, vLLM id 0)."""
    shift = conventions()[convention]["to_vllm"]
    out = tuple(i - shift for i in ids)
    if any(i < 0 for i in out) or (num_layers is not None and any(i > num_layers for i in out)):
        raise fail("SRG662", f"aux ids {list(ids)} (vLLM's convention) have no spelling in {convention}'s "
                   f"convention ({conventions()[convention]['meaning']}): they would become {list(out)}")
    return out


def runner_reads(fmt: DraftFormat, num_layers: int) -> dict[str, tuple[tuple[int, ...], str]]:
    """runner -> (vLLM ids it captures, why): top-level ids, nested ones where the runner reads them,
    else the engine default (2, L // 2, L - 3)."""
    out = {}
    for name, rule in runners().items():
        if fmt.ids_top:
            out[name] = (fmt.ids_top, "eagle_aux_hidden_state_layer_ids")
        elif fmt.ids_nested and "nested_eagle_config" in rule["reads"]:
            out[name] = (fmt.ids_nested, "eagle_config.eagle_aux_hidden_state_layer_ids")
        else:
            out[name] = (default_ids("vllm", num_layers), "engine default (2, L // 2, L - 3)")
    return out


def trained_on(fmt: DraftFormat, num_layers: int) -> tuple[tuple[int, ...], str] | None:
    """The ids (vLLM's convention) the head was trained on, where the producer is known: its written
    ids translated, or its default when it wrote none. With no producer known but ids written, the
    layout's writers decide (issue 42): when every producer that writes this layout numbers these ids
    alike (the nested eagle_config layout: SpecForge, TorchSpec, ModelOpt all number layer outputs),
    that reading is the trained one; None when they disagree (ambiguous: SRG659)."""
    producer = fmt.producer
    written = fmt.ids_written
    if producer is None:
        if written:
            readings = {to_vllm(written, w) for w in fmt.writers}
            if len(readings) == 1:
                names = ", ".join(fmt.writers)
                return readings.pop(), (f"written ids {list(written)}: every producer that writes this layout "
                                        f"without a mark ({names}) numbers them this way")
            return None
        # every producer's default names the same layers as vLLM's default (FIELD.md conventions)
        return default_ids("vllm", num_layers), "no ids written: every producer's default"
    if written:
        return to_vllm(written, producer), f"written ids {list(written)} in {producer}'s convention"
    return to_vllm(default_ids(producer, num_layers), producer), f"{producer}'s default"
