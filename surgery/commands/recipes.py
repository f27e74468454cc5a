"""`surgery recipes`: the shipped recipes, what each covers, and the engines' coverage."""
from __future__ import annotations

import json

from ..coverage import eagle3_without_model_type, method_coverage, summary
from ..diagnostics import EXIT_OK
from ..recipe import load_recipe
from ..resources import shipped_recipes


def cmd_recipes(args, out) -> int:
    recipes = [load_recipe(path) for path in shipped_recipes()]
    rows = []
    for path, r in zip(shipped_recipes(), recipes):
        t, d = r.applies_to["target"], r.applies_to["draft"]
        rows.append({"name": r.name, "file": str(path), "summary": r.summary, "target": t, "draft": d,
                     "covers": {"target_model_types": list(t.get("model_type") or []),
                                "target_architectures": list(t.get("architectures") or []),
                                "draft_model_types": list(d.get("model_type") or []),
                                "draft_architectures": list(d.get("architectures") or [])}})
    cov = summary(recipes)
    eagle3_gap = eagle3_without_model_type()
    methods = method_coverage(recipes)
    if args.json:
        out.write(json.dumps({"recipes": rows, "coverage": cov, "unsupported": cov["unsupported"],
                              "eagle3_architectures_without_model_type": eagle3_gap,
                              "method_coverage": methods}, indent=2) + "\n")
        return EXIT_OK
    width = max((len(r["name"]) for r in rows), default=0)
    for r in rows:
        out.write(f"{r['name']:<{width}}  {r['summary']}\n")
        for side in ("target", "draft"):
            types = r["covers"][f"{side}_model_types"] + r["covers"][f"{side}_architectures"]
            out.write(f"{'':<{width}}    {side}s: {', '.join(types)}\n")
    out.write(f"\n{cov['engine']} MTP coverage ({cov['source']}): {cov['covered']} of {cov['rewritten']} model types / "
              f"architectures it turns into MTP drafts are covered by a shipped recipe ({cov['percent']}%)\n")
    if cov["unsupported"]:
        out.write("not covered (surgery/data/unsupported.yaml):\n")
        for u in cov["unsupported"]:
            out.write(f"  {u['value']}: {u['unsupported'] or 'NO RECIPE AND NOT LISTED AS UNSUPPORTED'}\n")
    if eagle3_gap.get("architectures"):
        out.write(f"eagle3: {len(eagle3_gap['architectures'])} SupportsEagle3 architectures not selectable: "
                  f"{eagle3_gap['reason']} ({', '.join(eagle3_gap['architectures'])})\n")
    out.write(f"\n{methods['engine']} speculative methods that load a draft model ({methods['source']}): "
              f"{methods['covered']} of {methods['total']} methods / speculators algorithms covered by a shipped recipe "
              f"(no draft model, nothing to wire: {', '.join(methods['without_draft_model'])})\n")
    for m in methods["methods"] + methods["speculators_algorithms"]:
        name = m.get("method") if "speculators_model_type" not in m else \
            f"speculators {m['speculators_model_type']} (method {m['method']}" + \
            (", parallel drafting" if m["parallel_drafting"] else "") + ")"
        out.write(f"  {name}: {coverage_said(m)}\n")
    archs = methods["block_draft_architectures"]
    out.write(f"block / parallel drafter architectures in vLLM's registry: {methods['block_architectures_covered']} of "
              f"{len(archs)} listed by a shipped recipe\n")
    for a in archs:
        out.write(f"  {a['architecture']} ({a['module']}): {coverage_said(a)}\n")
    drafts = methods["draft_architectures"]
    out.write(f"draft architectures vLLM's registry loads with method eagle / eagle3 / dflash: "
              f"{sum(1 for a in drafts if a['covered_by'])} of {len(drafts)} listed by a recipe of that method\n")
    for a in drafts:
        said = coverage_said(a)
        plain = [w for w in a["written_as"] if w != a["architecture"]]
        out.write(f"  {a['architecture']} (method {a['method']}" + (f"; written {', '.join(plain)}" if plain else "") +
                  f"): {said}\n")
    return EXIT_OK


def coverage_said(row: dict) -> str:
    """What covers a method or architecture row: its shipped recipes, else why none does."""
    if row["covered_by"]:
        return ", ".join(row["covered_by"])
    return f"not covered: {row['unsupported'] or 'NO RECIPE AND NOT LISTED AS UNSUPPORTED'}"
