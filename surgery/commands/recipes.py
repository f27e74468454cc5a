"""`surgery recipes [NAME]`: the shipped recipes, what each covers, and the engines' coverage.

Text is for a person reading a terminal: by default one row per recipe (how many model types and
architectures it applies to, its summary cut to the row) and the coverage figures, every line bounded,
because the lists run to thousands of characters per recipe. The full lists are one step away: `surgery
recipes NAME` (one recipe) and `--verbose` (every recipe, and each method / architecture of the coverage
with what covers it or why nothing does). `--json` has everything, as before."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from ..engine.coverage import eagle3_without_model_type, method_coverage, summary
from ..text.diagnostics import EXIT_OK, Location, fail
from ..recipe import find_recipe, load_recipe
from ..resources import shipped_recipes

WIDTH = 120  # the default table's rows and the wrapped lists stay within this many characters
NOT_LISTED = "NO RECIPE AND NOT LISTED AS UNSUPPORTED"
#: (JSON key under "covers", words a person reads)
LISTS = (("target_model_types", "target model types"), ("target_architectures", "target architectures"),
         ("draft_model_types", "draft model types"), ("draft_architectures", "draft architectures"))


def recipe_row(path: Path, r) -> dict:
    """One shipped recipe: what `--json` prints under "recipes" and what the text is made of."""
    t, d = r.applies_to["target"], r.applies_to["draft"]
    return {"name": r.name, "file": str(path), "summary": r.summary, "target": t, "draft": d,
            "covers": {"target_model_types": list(t.get("model_type") or []),
                       "target_architectures": list(t.get("architectures") or []),
                       "draft_model_types": list(d.get("model_type") or []),
                       "draft_architectures": list(d.get("architectures") or [])}}


def cmd_recipes(args, out) -> int:
    paths = shipped_recipes()
    recipes = [load_recipe(path) for path in paths]
    rows = [recipe_row(path, r) for path, r in zip(paths, recipes)]
    if args.name is not None:
        row = named_row(rows, args.name)
        out.write(json.dumps(row, indent=2) + "\n" if args.json else full_text(row))
        return EXIT_OK
    cov, eagle3_gap, methods = summary(recipes), eagle3_without_model_type(), method_coverage(recipes)
    if args.json:
        out.write(json.dumps({"recipes": rows, "coverage": cov, "unsupported": cov["unsupported"],
                              "eagle3_architectures_without_model_type": eagle3_gap,
                              "method_coverage": methods}, indent=2) + "\n")
        return EXIT_OK
    if args.verbose:
        out.write("\n".join(full_text(row) for row in rows) + coverage_full(cov, eagle3_gap, methods))
    else:
        out.write(table_text(rows) + coverage_brief(cov, eagle3_gap, methods))
    return EXIT_OK


def named_row(rows: list[dict], name: str) -> dict:
    """The shipped recipe NAME; any other name is a usage error (SRG013, exit 2): `find_recipe` raises it for a
    plain name, with the closest shipped name ("did you mean eagle3?"), the rest (a path) is raised here."""
    for row in rows:
        if name in (row["name"], Path(row["file"]).stem):
            return row
    find_recipe(name)
    raise fail("SRG013", f"{name!r} is not the name of a shipped recipe (a recipe file of your own: `surgery plan "
               "FILE --target T --draft D`)", Location(name))


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3].rstrip() + "..."


def _wrap(text: str, indent: str = "  ") -> str:
    return textwrap.fill(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "    ",
                         break_long_words=False, break_on_hyphens=False) + "\n"


def table_text(rows: list[dict]) -> str:
    """The default: one row per recipe (name, how many target / draft model types and architectures it
    applies to, the summary cut to what is left of WIDTH), then where the full lists are."""
    width = max([len("recipe")] + [len(r["name"]) for r in rows])
    lines = [f"{'':<{width}}  {'targets':<11}  drafts",
             f"{'recipe':<{width}}  types archs  types archs  summary"]
    for r in rows:
        c = r["covers"]
        counts = f"{r['name']:<{width}}  " + "  ".join(
            f"{len(c[side + '_model_types']):>5} {len(c[side + '_architectures']):>5}" for side in ("target", "draft"))
        lines.append(f"{counts}  {_cut(r['summary'], WIDTH - len(counts) - 2)}")
    return "\n".join(lines) + "\n" + _wrap(
        "types / archs: how many model_type / architectures values a recipe applies to; every one, and the whole "
        "summary: `surgery recipes NAME` (`--verbose`: all recipes)", indent="")


def full_text(row: dict) -> str:
    """One recipe in full: its summary, its file, and every model type and architecture it applies to."""
    out = _wrap(f"{row['name']}: {row['summary']}", indent="") + f"  file: {row['file']}\n"
    for key, said in LISTS:
        values = row["covers"][key]
        out += _wrap(f"{said} ({len(values)}): {', '.join(values) or 'none'}")
    return out


def coverage_brief(cov: dict, eagle3_gap: dict, methods: dict) -> str:
    """The coverage figures, one bounded line each, naming what no shipped recipe covers (the reasons and
    the source of each figure are under --verbose)."""
    drafts = methods["draft_architectures"]
    block = methods["block_draft_architectures"]
    out = f"\n{cov['engine']} coverage by the shipped recipes (--verbose: each item, what covers it or why nothing does):\n"
    out += _wrap(f"MTP drafts (model types / architectures vLLM turns into MTP drafts): {cov['covered']} of "
                 f"{cov['rewritten']} covered ({cov['percent']}%)" + _uncovered([(u["value"], u) for u in cov["unsupported"]]))
    out += _wrap(f"speculative methods / speculators algorithms that load a draft model: {methods['covered']} of "
                 f"{methods['total']} covered" + _uncovered([(_method_name(m), m) for m in
                                                             methods["methods"] + methods["speculators_algorithms"]]))
    out += _wrap(f"block / parallel drafter architectures in vLLM's registry: {methods['block_architectures_covered']} "
                 f"of {len(block)} listed by a recipe" + _uncovered([(a["architecture"], a) for a in block]))
    out += _wrap(f"draft architectures loaded with method eagle / eagle3 / dflash: "
                 f"{sum(1 for a in drafts if a['covered_by'])} of {len(drafts)} listed by a recipe of that method"
                 + _uncovered([(a["architecture"], a) for a in drafts]))
    if eagle3_gap.get("architectures"):
        out += _wrap(f"eagle3: {len(eagle3_gap['architectures'])} SupportsEagle3 architectures not selectable: "
                     + ", ".join(eagle3_gap["architectures"]))
    return out


def _uncovered(named: list[tuple[str, dict]]) -> str:
    """"; not covered: a, b" for the rows no shipped recipe covers; one that surgery/data/unsupported.yaml
    does not list either is marked, as --verbose marks it."""
    names = [n + ("" if row.get("unsupported") else f" ({NOT_LISTED})") for n, row in named if not row.get("covered_by")]
    return f"; not covered: {', '.join(names)}" if names else ""


def _method_name(m: dict) -> str:
    return m["method"] if "speculators_model_type" not in m else f"speculators {m['speculators_model_type']}"


def coverage_full(cov: dict, eagle3_gap: dict, methods: dict) -> str:
    """--verbose: each figure with its source, and every method and architecture with the recipes that cover
    it or the reason none does (surgery/data/unsupported.yaml)."""
    out = (f"\n{cov['engine']} MTP coverage ({cov['source']}): {cov['covered']} of {cov['rewritten']} model types / "
           f"architectures it turns into MTP drafts are covered by a shipped recipe ({cov['percent']}%)\n")
    if cov["unsupported"]:
        out += "not covered (surgery/data/unsupported.yaml):\n"
        for u in cov["unsupported"]:
            out += f"  {u['value']}: {u['unsupported'] or NOT_LISTED}\n"
    if eagle3_gap.get("architectures"):
        out += (f"eagle3: {len(eagle3_gap['architectures'])} SupportsEagle3 architectures not selectable: "
                f"{eagle3_gap['reason']} ({', '.join(eagle3_gap['architectures'])})\n")
    out += (f"\n{methods['engine']} speculative methods that load a draft model ({methods['source']}): "
            f"{methods['covered']} of {methods['total']} methods / speculators algorithms covered by a shipped recipe "
            f"(no draft model, nothing to wire: {', '.join(methods['without_draft_model'])})\n")
    for m in methods["methods"] + methods["speculators_algorithms"]:
        name = m.get("method") if "speculators_model_type" not in m else \
            f"speculators {m['speculators_model_type']} (method {m['method']}" + \
            (", parallel drafting" if m["parallel_drafting"] else "") + ")"
        out += f"  {name}: {coverage_said(m)}\n"
    archs = methods["block_draft_architectures"]
    out += (f"block / parallel drafter architectures in vLLM's registry: {methods['block_architectures_covered']} of "
            f"{len(archs)} listed by a shipped recipe\n")
    for a in archs:
        out += f"  {a['architecture']} ({a['module']}): {coverage_said(a)}\n"
    drafts = methods["draft_architectures"]
    out += (f"draft architectures vLLM's registry loads with method eagle / eagle3 / dflash: "
            f"{sum(1 for a in drafts if a['covered_by'])} of {len(drafts)} listed by a recipe of that method\n")
    for a in drafts:
        plain = [w for w in a["written_as"] if w != a["architecture"]]
        out += (f"  {a['architecture']} (method {a['method']}" + (f"; written {', '.join(plain)}" if plain else "")
                + f"): {coverage_said(a)}\n")
    return out


def coverage_said(row: dict) -> str:
    """What covers a method or architecture row: its shipped recipes, else why none does."""
    if row["covered_by"]:
        return ", ".join(row["covered_by"])
    return f"not covered: {row['unsupported'] or NOT_LISTED}"
