"""`surgery new`: recognise a draft/target pair from its two configs and write a starting recipe
from the closest shipped one, checked (parse + resolve) against that pair before it is written.

Choosing, config-only (no torch):
1. a shipped recipe is a candidate when its `applies_to` covers both sides (model_type or the text
   config's model_type; architectures where the recipe lists them);
2. a candidate fits when the resolved plan for the pair is ok (every `requires` holds, every layer
   map expands, no error-level step), for the given runtime (default: vLLM, pp 1, tp 1);
3. among fitting candidates the most specific wins: more sides pinned by `architectures`, then the
   narrower `applies_to` (fewer listed model types / architectures), then the name. The others that
   fit are reported as alternatives (an EAGLE-1 head is config-wise also a one-layer Llama).

No candidate fits: SRG020 (exit 1), with each candidate's first reason.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .version import __version__
from .text.diagnostics import Diagnostic, Location, SurgeryError, diag
from .facts import ModelFacts, read_facts
from .plan import Runtime
from .recipe import Recipe, load_recipe, parse_recipe, read_text
from .resolver import resolve
from .resources import schemas_dir, shipped_recipes
from .formats import format_of

SCHEMA_LINE = "# yaml-language-server: $schema="


@dataclass
class Candidate:
    name: str
    file: str
    applies: bool
    ok: bool
    specificity: tuple
    reasons: list[Diagnostic] = field(default_factory=list)
    operations: int = 0
    skipped: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"recipe": self.name, "file": self.file, "applies": self.applies, "fits": self.ok,
                "operations": self.operations, "skipped": self.skipped,
                "reasons": [d.to_dict() for d in self.reasons]}


def eagle1_head_shape(draft: ModelFacts, target: ModelFacts) -> bool:
    """A plain one-layer causal LM exactly as wide as the target, with the target's vocabulary: the shape of a
    published EAGLE-1 head (yuhuili/EAGLE-LLaMA3.1-Instruct-8B: one Llama layer at 4096 + an `fc`, no norm, no
    lm_head). vLLM's draft_model method would build it as a whole LlamaForCausalLM and find no norm or lm_head
    in the checkpoint, and no one publishes a one-layer standalone draft at the target's width; so `new` does
    not offer draft-model beside eagle for it. Only the suggestion list changes: `validate draft-model` still
    answers for such a pair, and `--weights` tells the two apart."""
    s = draft.scalars
    return (s.get("num_hidden_layers") == 1 and s.get("hidden_size") == target.scalars.get("hidden_size")
            and s.get("vocab_size") == target.scalars.get("vocab_size") and not s.get("speculative_class"))


@dataclass
class NewResult:
    target: ModelFacts
    draft: ModelFacts
    candidates: list[Candidate]
    chosen: Candidate | None
    text: str | None = None
    out: str | None = None
    draft_format: dict | None = None  # the draft's published format and the method it states

    @property
    def ok(self) -> bool:
        return self.chosen is not None

    @property
    def alternatives(self) -> list[str]:
        return [c.name for c in self.candidates if c.ok and c is not self.chosen
                and not (c.name == "draft-model" and eagle1_head_shape(self.draft, self.target))]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "ok": self.ok,
            "target": describe(self.target), "draft": describe(self.draft),
            "recipe": self.chosen.name if self.chosen else None,
            "from": self.chosen.file if self.chosen else None,
            "alternatives": self.alternatives,
            "draft_format": self.draft_format,
            "out": self.out,
            "candidates": [c.to_dict() for c in self.candidates],
        }
        if self.text is not None and self.out is None:
            d["text"] = self.text
        if not self.ok:
            d["diagnostics"] = [no_fit_diagnostic(self).to_dict()]
        return d


def describe(f: ModelFacts) -> dict[str, Any]:
    return {"config": f.source, "model_type": f.model_type, "text_model_type": f.text_model_type,
            "architectures": list(f.architectures), "pin": f.pin()}


def label(f: ModelFacts) -> str:
    arch = f" ({f.architectures[0]})" if f.architectures else ""
    text = f"/{f.text_model_type}" if f.text_model_type != f.model_type else ""
    pin = f.pin() or {}
    at = f" at {pin['repo_id']}@{pin['commit']}" if pin.get("commit") else ""  # a hub model: the commit read
    return f"{f.model_type}{text}{arch}{at}"


def _pinned(recipe: Recipe, side: str, f: ModelFacts) -> int:
    """1 when the recipe's `architectures` name this side's own architecture (the most specific match). A
    draft admitted only by the name vLLM serves it as (SRG206) does not pin: a plain LlamaForCausalLM is an
    EAGLE-1 head and a standalone draft alike, and only the method tells them apart."""
    archs = recipe.applies_to[side].get("architectures")
    return int(archs is not None and bool(set(f.architectures) & set(archs)))


def _admitted(plan, side: str) -> bool:
    """Whether the recipe applies to this side: the resolver's own rule (resolver.check_applies_to: by the
    architecture vLLM builds, model_type as the fallback), read as the absence of its SRG204 for the side."""
    return not any(d.code == "SRG204" and f"applies_to.{side}" in str(d.location.key_path or d.location)
                   for d in plan.diagnostics)


def _breadth(recipe: Recipe) -> int:
    return sum(len(sel.get("model_type") or ()) + len(sel.get("architectures") or ())
               for sel in recipe.applies_to.values())


def format_method(draft: ModelFacts) -> tuple[dict | None, str | None]:
    """(the draft's published format, the speculative method it states): a speculators file names
    its method (`speculators_model_type` as vLLM maps it), ModelOpt and EAGLE-3 configs are EAGLE-3
    heads (surgery/data/formats.yaml); a plain config states none."""
    fmt = format_of(draft)
    if fmt.name == "hf":
        return None, None
    method = fmt.speculators.method if fmt.speculators is not None else "eagle3"
    return dict(fmt.to_dict(), method=method), method


def choose(target: ModelFacts, draft: ModelFacts, runtime: Runtime | None = None) -> NewResult:
    runtime = runtime or Runtime(engine="vllm")
    candidates = []
    fmt, method = format_method(draft)
    for path in shipped_recipes():
        recipe = load_recipe(path)
        plan = resolve(recipe, draft, target, runtime)
        t_ok, d_ok = _admitted(plan, "target"), _admitted(plan, "draft")
        t_pin, d_pin = _pinned(recipe, "target", target), _pinned(recipe, "draft", draft)
        errors = [d for d in plan.diagnostics if d.severity == "error"]
        recipe_method = (recipe.engine.get("vllm") or {}).get("method")
        if method is not None and recipe_method != method:  # the format states the method: others do not fit
            d_ok = False
            errors.append(diag("SRG020", f"the draft is a {fmt['format']}-format head, method {method}; recipe "
                               f"{recipe.name} is for method {recipe_method}", Location(draft.source)))
        cand = Candidate(recipe.name, str(path), t_ok and d_ok, plan.ok and t_ok and d_ok,
                         (-(t_pin + d_pin), _breadth(recipe), recipe.name), errors,
                         len(plan.operations), len(plan.skipped))
        candidates.append(cand)
    fitting = sorted((c for c in candidates if c.ok), key=lambda c: c.specificity)
    # candidates that apply come first in reports; then by name
    candidates.sort(key=lambda c: (not c.ok, not c.applies, c.specificity))
    return NewResult(target, draft, candidates, fitting[0] if fitting else None, draft_format=fmt)


MAX_CANDIDATES = 3  # issue 42: the closest few, each with the one reason that blocks it
LONG_LIST = re.compile(r"[\[(]([^\[\]()]*,){4,}[^\[\]()]*[\])]")


# a candidate refused because the draft belongs to another family (draft-model's SRG683) is never the
# closest: that family's own recipe is, however many things block it
ANOTHER_FAMILY = ("SRG683",)


def closest(result: NewResult) -> list[Candidate]:
    """The failing candidates nearest to fitting: those not refused for the draft's family first (that
    refusal says the draft belongs elsewhere, however well the rest fits), then those whose applies_to
    covers the pair, then the fewest blocking errors, then the most specific (architectures pinned,
    narrower applies_to)."""
    failing = [c for c in result.candidates if not c.ok]
    return sorted(failing, key=lambda c: (any(d.code in ANOTHER_FAMILY for d in c.reasons), not c.applies,
                                          len(c.reasons) or 99, c.specificity))[:MAX_CANDIDATES]


def _short(text: str) -> str:
    """A reason without the long lists it may quote (a recipe's ~60 model types): `(61 listed)`."""
    return LONG_LIST.sub(lambda m: f"{m.group(0)[0]}{m.group(0).count(',') + 1} listed{m.group(0)[-1]}", text)


def no_fit_diagnostic(result: NewResult) -> Diagnostic:
    """SRG020 naming the closest failing recipe and the one thing that blocks it, then at most
    MAX_CANDIDATES candidates with one reason each (`--json` keeps every candidate and reason)."""
    near = closest(result)
    lines = []
    for c in near:
        first = c.reasons[0] if c.reasons else None
        why = f"{first.code}: {_short(first.message)}" if first else "applies_to does not cover the pair"
        more = f" (+{len(c.reasons) - 1} more)" if len(c.reasons) > 1 else ""
        lines.append(f"{c.name}: {why}{more}")
    best = near[0] if near else None
    head = f"no shipped recipe fits draft {label(result.draft)} -> target {label(result.target)}"
    family = str(result.draft.scalars.get("speculative_class") or "")
    if "does not serve" in family:  # the one thing to know: no engine release builds this class at all
        head += f"; {family.split(' -> ')[0]} is a speculative draft class no vLLM release serves " \
                "(surgery/data/unsupported.yaml says why)"
        best = None
    if best is not None and best.applies and len(best.reasons) == 1:
        head += f"; closest: {best.name}, blocked by one thing: {best.reasons[0].code}"
        if best.reasons[0].hint:
            head += f" ({_short(best.reasons[0].hint)})"
    elif best is not None and best.applies:
        head += f"; closest: {best.name} ({len(best.reasons)} blocking reasons)"
    return diag("SRG020", head, Location(result.draft.source),
                hint="start from the closest recipe and `surgery validate` your copy; closest candidates:\n      "
                + "\n      ".join(lines))


def render(result: NewResult, out: Path | None, name: str | None) -> str:
    """The chosen shipped recipe's text, with a schema line that resolves from where it is written,
    a header saying where it came from, and optionally a new `recipe:` name."""
    assert result.chosen is not None
    source = Path(result.chosen.file)
    text = read_text(source)
    lines = text.splitlines(keepends=True)
    if lines and lines[0].startswith(SCHEMA_LINE):
        lines = lines[1:]
    schema = (schemas_dir() / "recipe.schema.json").resolve()
    if out is not None:
        where = os.path.relpath(schema, out.resolve().parent)
    else:
        where = schema.as_uri()
    t, d = result.target, result.draft
    header = [
        f"{SCHEMA_LINE}{where}\n",
        "#\n",
        f"# Started by `surgery new` (spec-surgery {__version__}) from the shipped recipe `{result.chosen.name}`\n",
        f"# for draft {label(d)} -> target {label(t)}.\n",
        f"# Check it: surgery validate {out if out is not None else 'THIS_FILE'} --target {t.source} --draft {d.source}\n",
    ]
    if result.draft_format is not None:
        f = result.draft_format
        header.append(f"# The draft is a {f['format']}-format head (method {f['method']}): only recipes for that "
                      "method were candidates.\n")
    if result.alternatives:
        header.append(f"# Also fits: {', '.join(result.alternatives)}.\n")
    header.append("# The shipped recipe's notes follow.\n")
    body = "".join(lines)
    if name is not None:
        body, n = re.subn(r"(?m)^recipe:[ \t]*\S+[ \t]*$", f"recipe: {name}", body, count=1)
        assert n == 1, "shipped recipe without a top-level `recipe:` line"
    return "".join(header) + body


def new_recipe(target_path: str, draft_path: str, out: str | None = None, name: str | None = None,
               force: bool = False, runtime: Runtime | None = None) -> NewResult:
    """Choose, render, re-check against the pair, then write (to `out`, when given)."""
    runtime = runtime or Runtime(engine="vllm")
    target, draft = read_facts(target_path), read_facts(draft_path)
    result = choose(target, draft, runtime)
    if not result.ok:
        return result
    out_path = Path(out) if out is not None else None
    if out_path is not None and out_path.exists() and not force:
        raise SurgeryError(diag("SRG021", f"{out_path} exists", Location(str(out_path))))
    text = render(result, out_path, name)
    # what is written must validate against the pair (same runtime)
    plan = resolve(parse_recipe(text, str(out_path or "<new recipe>")), draft, target, runtime)
    if not plan.ok:  # a shipped recipe that fits fits after the header change too; never expected
        raise SurgeryError(plan.errors)
    result.text = text
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_name(out_path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out_path)
        result.out = str(out_path)
    return result
