"""`surgery plan --format mermaid`: the plan's draft-to-target wiring as a Mermaid flowchart (issue 35).

The flowchart renders on GitHub and in Hugging Face model cards (a ```mermaid fence). It shows, with
the target on the left and the draft on the right:

- each layer map (share_kv, copy_attrs and any other op that names the map) as edges from target layer
  groups to draft layer groups, compacted the way the table compacts them (`compact_ranges`): the draft
  layers that read one target layer form one node, and a run of one-to-one rows with a constant offset
  (draft i -> target i + c) forms one range node per side, so a 60-layer map is a handful of nodes;
- the captured target layers (capture_hidden_states) feeding the draft's hidden-state input;
- the modules the draft takes from the target (share_module, share_buffer) and the ones it keeps (keep);
- any other op as a node of its step (nothing in the plan is left out of the picture).

Skipped steps are listed as Mermaid comments (`%%`), which do not render. Config-only: no engine import.
"""
from __future__ import annotations

import re

from .ops.common import compact_ranges
from .ops.registry import UNITS

EDGE_MAP = "-->"
EDGE_SHARE = "==>"
EDGE_CAPTURE = "-.->"


def _label(text: str) -> str:
    """A quoted Mermaid label: quotes as entity codes, line breaks as <br/>."""
    return '"' + text.replace('"', "#quot;").replace("\n", "<br/>") + '"'


def _ident(side: str, kind: str, text: str) -> str:
    """A node id: letters, digits and underscores only (layer ranges: '0-2, 5' -> '0to2_5')."""
    body = text.replace("-", "to").replace(", ", "_")
    return f"{side}_{kind}_" + re.sub(r"[^A-Za-z0-9_]", "_", body)


def _layers(values: list[int]) -> str:
    text = compact_ranges(values)
    return f"layer {text}" if len(values) == 1 else f"layers {text}"


def map_segments(rows) -> list[tuple[list[int], list[int], str, str]]:
    """A layer map's rows as (draft layers, target layers, draft type, target type) segments: the draft
    layers that read one target layer together (as the table groups them), then consecutive
    one-to-one rows with a constant offset merged into one range segment."""
    groups: dict[tuple, list[int]] = {}
    for r in rows:
        groups.setdefault((r.target, r.draft_type, r.target_type), []).append(r.draft)
    ordered = sorted(groups.items(), key=lambda kv: min(kv[1]))
    segments: list[tuple[list[int], list[int], str, str]] = []
    for (target, dtype, ttype), drafts in ordered:
        if segments and len(drafts) == 1:
            prev_d, prev_t, prev_dt, prev_tt = segments[-1]
            one_to_one = len(prev_d) == len(prev_t) and prev_d == list(range(prev_d[0], prev_d[-1] + 1)) \
                and prev_t == list(range(prev_t[0], prev_t[-1] + 1))
            if one_to_one and (prev_dt, prev_tt) == (dtype, ttype) and drafts[0] == prev_d[-1] + 1 \
                    and target == prev_t[-1] + 1:
                prev_d.append(drafts[0])
                prev_t.append(target)
                continue
        segments.append((sorted(drafts), [target], dtype, ttype))
    return segments


class _Chart:
    def __init__(self):
        self.nodes = {"target": {}, "draft": {}}  # side -> id -> label
        self.edges: list[tuple[str, str, str, str]] = []  # (from, arrow, label, to)

    def node(self, side: str, ident: str, label: str) -> str:
        self.nodes[side].setdefault(ident, label)
        return ident

    def edge(self, a: str, arrow: str, label: str, b: str) -> None:
        if (a, arrow, label, b) not in self.edges:
            self.edges.append((a, arrow, label, b))


def render_mermaid(plan) -> str:
    """The plan as a Mermaid flowchart (text starting `flowchart LR`)."""
    chart = _Chart()
    rt = plan.runtime
    t, d = plan.target, plan.draft

    # layer maps: one edge per segment, labelled with the map and the op kinds that use it
    on_map: dict[str, list[str]] = {}
    for o in plan.operations:
        name = getattr(o, "map", None)
        if name is not None and o.op not in on_map.setdefault(name, []):
            on_map[name].append(o.op)
    for name, rows in plan.layer_maps.items():
        kinds = on_map.get(name) or ["no op"]
        types = {r.draft_type for r in rows} | {r.target_type for r in rows}
        for drafts, targets, dtype, ttype in map_segments(rows):
            t_text, d_text = compact_ranges(targets), compact_ranges(drafts)
            t_id = chart.node("target", _ident("t", "L", t_text), _layers(targets) + (f"\n{ttype}" if len(types) > 1 else ""))
            d_id = chart.node("draft", _ident("d", "L", d_text), _layers(drafts) + (f"\n{dtype}" if len(types) > 1 else ""))
            chart.edge(t_id, EDGE_MAP, f"{name}: {', '.join(kinds)}", d_id)

    by_step: dict[int, list] = {}
    for o in plan.operations:
        by_step.setdefault(o.step, []).append(o)
    for step, ops in by_step.items():
        first = ops[0]
        key = first.op
        if getattr(first, "map", None) is not None:
            continue  # drawn with its map
        layers = [o.layer for o in ops if getattr(o, "layer", None) is not None]
        where = f"\n({_layers(layers)})" if layers else ""
        suffix = ("_" + compact_ranges(layers)) if layers else ""
        if hasattr(first, "layers") and hasattr(first, "layer_set"):  # capture_hidden_states
            captured = sorted({i for o in ops for i in o.layers})
            src = chart.node("target", _ident("t", "S", first.layer_set),
                             f"{_layers(captured) if captured else 'no layers'}\n({first.layer_set})")
            dst = chart.node("draft", "d_hidden_in", "captured hidden states in")
            chart.edge(src, EDGE_CAPTURE, key, dst)
        elif hasattr(first, "role") and hasattr(first, "tied_to"):  # keep
            tie = f", tied to {first.tied_to}" if getattr(first, "tied_to", None) not in (None, "none") else ""
            chart.node("draft", _ident("d", "R", first.role + suffix), f"{first.role}{where}\n{key}: its own{tie}")
        elif hasattr(first, "role"):  # share_module
            source = getattr(first, "source", "target") or "target"
            other = "draft" if source == "target" else "target"
            ident = _ident("x", "R", first.role + suffix)
            a = chart.node(source, source[0] + ident[1:], f"{first.role}{where}")
            b = chart.node(other, other[0] + ident[1:], f"{first.role}{where}")
            how = " if identical" if getattr(first, "if_draft_has_own", None) == "share_if_identical" else ""
            chart.edge(a, EDGE_SHARE, f"{key}{how}", b)
        elif hasattr(first, "attr"):  # share_buffer
            source = getattr(first, "source", "target") or "target"
            other = "draft" if source == "target" else "target"
            a = chart.node(source, _ident(source[0], "B", first.attr), first.attr)
            b = chart.node(other, _ident(other[0], "B", first.attr), f"{first.attr}\n({getattr(first, 'scope', '')})")
            chart.edge(a, EDGE_SHARE, key, b)
        else:  # an op kind this renderer has no shape for: its step, as the table labels it
            chart.node("draft", f"d_step{step}", f"[{step}] {UNITS[first.op].label(first)}")

    status = "OK" if plan.ok else "NOT OK"
    lines = ["flowchart LR",
             f"  %% spec-surgery plan {plan.recipe} [{status}]: draft {d['model_type']} -> target {t['model_type']}, "
             f"engine={rt.engine} pp={rt.pp_size} tp={rt.tp_size}"]
    titles = {"target": f"target: {t['model_type']}, {t['num_layers']} layers",
              "draft": f"draft: {d['model_type']}, {d['num_layers']} layers"}
    for side in ("target", "draft"):
        lines.append(f"  subgraph {side} [{_label(titles[side])}]")
        lines.extend(f"    {ident}[{_label(label)}]" for ident, label in chart.nodes[side].items())
        lines.append("  end")
    for a, arrow, label, b in chart.edges:
        lines.append(f"  {a} {arrow}|{_label(label)}| {b}")
    for s in plan.skipped:
        what = s.role or s.map or s.attr or s.layer_set or ""
        lines.append(f"  %% skipped [{s.step}] {s.op} {what}: {s.code}")
    return "\n".join(lines)
