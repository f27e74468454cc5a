"""`surgery plan --format mermaid` (issue 35): the plan's layer map(s) and shared modules as a Mermaid
flowchart.

- golden: the Gemma 4 E2B pair under gemma4-mtp equals tests/data/mermaid/gemma4-mtp-E2B.mmd
  (regenerate with `SURGERY_UPDATE_GOLDEN=1 pytest tests/test_plan_mermaid.py`, then read the diff);
- every chart is a flowchart: the first line is `flowchart`, every line is a comment, a subgraph, `end`,
  a node or an edge, and every edge joins declared nodes (`check_flowchart`);
- every operation of the plan is in the chart (its recipe key is named), skipped steps are comments;
- layer ranges compact as the table compacts them: a 60-layer one-to-one map is two nodes, not 120;
- `--format json` is `--json`, `--format table` the default, both at once a usage error;
- with MERMAID_NODE_MODULES set (a folder with the npm packages mermaid and jsdom), Mermaid's own parser
  (tools/mermaid_check.mjs) accepts every chart.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from testpaths import CONFIGS, E2B, E2B_ASSISTANT, ROOT
from surgery import Runtime, load_recipe, resolve
from surgery.facts import read_facts
from surgery.mermaid import map_segments, render_mermaid
from surgery.plan import MapRow

GOLDEN = ROOT / "tests" / "data" / "mermaid" / "gemma4-mtp-E2B.mmd"
PAIRS = ROOT / "surgery" / "data" / "pairs"

PLANS = {
    "gemma4-mtp": ("gemma4-mtp", E2B, E2B_ASSISTANT),
    "eagle3": ("eagle3", CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json"),
    "deepseek-mtp-v32": ("deepseek-mtp", CONFIGS / "DeepSeek-V3.2-Exp.json", CONFIGS / "DeepSeek-V3.2-Exp.json"),
    "dflash": ("dflash", PAIRS / "llama-target", PAIRS / "dflash" / "draft"),
    "gemma4-mtp-pp2": ("gemma4-mtp", E2B, E2B_ASSISTANT),
}

NODE = re.compile(r'^\s*([A-Za-z][A-Za-z0-9_]*)\["[^"]*"\]$')
SUBGRAPH = re.compile(r'^\s*subgraph ([A-Za-z][A-Za-z0-9_]*) \["[^"]*"\]$')
EDGE = re.compile(r'^\s*([A-Za-z][A-Za-z0-9_]*) (-->|==>|-\.->)\|"[^"]*"\| ([A-Za-z][A-Za-z0-9_]*)$')


def check_flowchart(text: str) -> tuple[set[str], list[tuple[str, str]]]:
    """Fail unless `text` is a flowchart in the subset the renderer writes; (node ids, edges)."""
    lines = text.rstrip("\n").split("\n")
    assert re.match(r"^flowchart (LR|TB|TD|RL|BT)$", lines[0]), lines[0]
    nodes: set[str] = set()
    subgraphs: set[str] = set()
    edges: list[tuple[str, str]] = []
    depth = 0
    for line in lines[1:]:
        if not line.strip() or line.strip().startswith("%%"):
            continue
        if m := SUBGRAPH.match(line):
            assert depth == 0, f"nested subgraph: {line}"
            subgraphs.add(m.group(1))
            depth += 1
        elif line.strip() == "end":
            assert depth == 1, "end without subgraph"
            depth -= 1
        elif m := NODE.match(line):
            assert m.group(1) not in nodes, f"node declared twice: {m.group(1)}"
            nodes.add(m.group(1))
        elif m := EDGE.match(line):
            edges.append((m.group(1), m.group(3)))
        else:
            raise AssertionError(f"not a flowchart statement: {line!r}")
    assert depth == 0, "subgraph not closed"
    assert not nodes & subgraphs and not nodes & {"end", "graph", "flowchart", "subgraph"}
    for a, b in edges:
        assert a in nodes and b in nodes, f"edge {a} -> {b} joins an undeclared node"
    return nodes, edges


def _plan(name: str):
    recipe, target, draft = PLANS[name]
    rt = Runtime(pp_size=2) if name.endswith("pp2") else Runtime()
    return resolve(load_recipe(recipe), read_facts(draft), read_facts(target), rt)


def test_golden_gemma4_e2b(run_cli):
    code, out, err = run_cli("plan", "gemma4-mtp", "--target", E2B, "--draft", E2B_ASSISTANT, "--format", "mermaid")
    assert code == 0
    if os.environ.get("SURGERY_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(out)
    assert out == GOLDEN.read_text()
    nodes, edges = check_flowchart(out)
    # the E2B map: draft 0-2 read target 13 (sliding), draft 3 reads target 14 (full), as the table says
    assert ("t_L_13", "d_L_0to2") in edges and ("t_L_14", "d_L_3") in edges
    assert ("t_R_input_embeddings", "d_R_input_embeddings") in edges and "d_R_lm_head" in nodes
    assert "kv_source: share_kv, copy_attrs" in out and "keep: its own, tied to draft_embeddings" in out
    # the standard E2B pair has no warning (issue 42 class 9: SRG334 is a note while the device is unknown)
    assert err == ""
    # findings go to stderr, so stdout pastes as it is: here the note, shown by --verbose
    code, out_v, err = run_cli("plan", "gemma4-mtp", "--target", E2B, "--draft", E2B_ASSISTANT, "--format", "mermaid",
                               "--verbose")
    assert out_v == out and "note SRG334" in err and "SRG334" not in out


@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_plan_is_a_flowchart_naming_every_operation(name):
    from surgery.ops.registry import UNITS

    plan = _plan(name)
    text = render_mermaid(plan)
    check_flowchart(text)
    for o in plan.operations:
        assert UNITS[o.op].kind in text, (o.op, text)
    for s in plan.skipped:
        assert f"%% skipped [{s.step}] {s.op}" in text
    assert f"[{'OK' if plan.ok else 'NOT OK'}]" in text.split("\n")[1]


def _row(d: int, t: int, typ: str = "full_attention") -> MapRow:
    return MapRow(draft=d, target=t, draft_type=typ, target_type=typ, head_dim=128, num_kv_heads=8, sliding_window=None)


def test_segments_compact_like_the_table():
    # 60 one-to-one rows at an offset: one segment, not 60
    assert map_segments([_row(i, i + 2) for i in range(60)]) == [(list(range(60)), list(range(2, 62)),
                                                                   "full_attention", "full_attention")]
    # many-to-one groups stay the table's groups; a type change or a jump starts a new segment
    rows = [_row(0, 13, "s"), _row(1, 13, "s"), _row(2, 13, "s"), _row(3, 14, "f")]
    assert [(d, t) for d, t, *_ in map_segments(rows)] == [([0, 1, 2], [13]), ([3], [14])]
    rows = [_row(0, 0), _row(1, 1), _row(2, 5), _row(3, 6), _row(4, 7, "sliding_attention")]
    assert [(d, t) for d, t, *_ in map_segments(rows)] == [([0, 1], [0, 1]), ([2, 3], [5, 6]), ([4], [7])]
    # interleaved draft layers reading two targets: one node per target, as the table's "0, 2" rows
    rows = [_row(0, 10), _row(1, 11), _row(2, 10), _row(3, 11)]
    assert [(d, t) for d, t, *_ in map_segments(rows)] == [([0, 2], [10]), ([1, 3], [11])]


def test_sixty_layer_map_is_a_handful_of_nodes():
    from dataclasses import replace

    plan = _plan("gemma4-mtp")
    rows = tuple(_row(i, i) for i in range(60))
    big = replace(plan, layer_maps={"kv_source": rows}, target={**plan.target, "num_layers": 60},
                  draft={**plan.draft, "num_layers": 60})
    nodes, edges = check_flowchart(render_mermaid(big))
    assert {"t_L_0to59", "d_L_0to59"} <= nodes and ("t_L_0to59", "d_L_0to59") in edges
    assert len([n for n in nodes if "_L_" in n]) == 2


def test_labels_are_escaped():
    from dataclasses import replace

    plan = _plan("gemma4-mtp")
    odd = replace(plan, target={**plan.target, "model_type": 'we"ird'})
    text = render_mermaid(odd)
    check_flowchart(text)
    assert "we#quot;ird" in text


def test_format_choices(run_cli):
    base = ("plan", "gemma4-mtp", "--target", E2B, "--draft", E2B_ASSISTANT)
    _, as_json, _ = run_cli(*base, "--json")
    _, fmt_json, _ = run_cli(*base, "--format", "json")
    assert json.loads(as_json) == json.loads(fmt_json)
    _, table, _ = run_cli(*base)
    _, fmt_table, _ = run_cli(*base, "--format", "table")
    assert table == fmt_table and table.startswith("plan gemma4-mtp")
    code, out, err = run_cli(*base, "--format", "mermaid", "--json")
    assert code == 2 and "SRG011" in err and json.loads(out)["ok"] is False
    code, out, err = run_cli(*base, "--format", "svg")
    assert code == 2 and "SRG011" in err
    # a failure under --format json answers in JSON, as under --json
    code, out, _ = run_cli("plan", "no-such-recipe", "--target", E2B, "--draft", E2B_ASSISTANT, "--format", "json")
    assert code == 2 and json.loads(out)["ok"] is False
    code, out, _ = run_cli("plan", "gemma4-mtp", "--target", E2B, "--draft", E2B_ASSISTANT, "--pp", "2",
                           "--format", "mermaid")
    assert code == 1 and out.startswith("flowchart") and "[NOT OK]" in out


def test_mermaid_own_parser_accepts_every_chart(tmp_path):
    modules = os.environ.get("MERMAID_NODE_MODULES")
    if not modules or not shutil.which("node"):
        pytest.skip("MERMAID_NODE_MODULES (npm mermaid + jsdom) not set; check_flowchart covers the syntax")
    files = [GOLDEN]
    for name in sorted(PLANS):
        f = tmp_path / f"{name}.mmd"
        f.write_text(render_mermaid(_plan(name)))
        files.append(f)
    run = subprocess.run(["node", str(ROOT / "tools" / "mermaid_check.mjs"), *map(str, files)],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "MERMAID_NODE_MODULES": modules})
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("OK ") == len(files) and "flowchart" in run.stdout


def test_docs_snippet_is_the_golden_chart():
    text = (ROOT / "docs" / "recipes.md").read_text()
    block = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert block == GOLDEN.read_text()
