"""The `surgery` command. Config-only commands (validate, plan, explain, recipes) never import
torch, transformers or vllm; `apply` imports them lazily."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from typing import Sequence

from .commands import load_entry
from .text.diagnostics import EXIT_INVALID, EXIT_OK, EXIT_USAGE, SurgeryError, diag
from .engine.cards import ENGINES
from .text.render import counts, render_diagnostics
from .text.escape import EscapedOut
from .version import __version__

EXIT_CODES = "exit codes: 0 fine, 1 {one}, 2 usage error or unreadable input, 130 interrupted"
EXIT_CODES_MAIN = EXIT_CODES.format(one="recipe or configs invalid (for each other), apply/verify failed, "
                                    "no shipped recipe fits (new)")


def _epilog(examples: str, one: str = "recipe or configs invalid for each other") -> str:
    return examples + "\n\n" + EXIT_CODES.format(one=one)


EPILOG_MAIN = """examples:
  surgery recipes
  surgery plan gemma4-mtp --target path/to/target --draft path/to/draft
  surgery validate recipes/gemma4-mtp.yaml --target T --draft D --pp 2 --json
  surgery validate eagle3 --target T --draft D --weights --method eagle3   # + safetensors headers
  surgery audit gemma4-mtp --target T --draft D --kv-cache-dtype fp8      # vLLM's stock wiring vs the recipe
  surgery apply recipes/gemma4-mtp.yaml          # built-in tiny pair, HF, verify + speculative decoding
  surgery new --target T --draft D --out my-recipe.yaml
  surgery doctor --recipe gemma4-mtp          # before `vllm serve`: plugin entry point, hooks, recipe
  surgery explain SRG316

output: text for people, `--json` (every command) for scripts; no colour codes or progress
lines unless stderr is a terminal (NO_COLOR honoured); diagnostics go to stderr.

""" + EXIT_CODES_MAIN


class _Parser(argparse.ArgumentParser):
    """argparse exits with its own message format; route usage errors through our coded diagnostics."""

    def error(self, message: str):  # noqa: D401
        raise SurgeryError(diag("SRG011", message, hint=f"run `{self.prog} --help`"))


def _int_in(low: int, high: int):
    """An argparse type: an integer in low..high, a usage error (exit 2) otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in {low}..{high}, got {value}")
        return value

    return parse


_parallel_size = _int_in(1, 4096)  # --pp / --tp
_positive_int = _int_in(1, 100_000)  # --num-draft-tokens / --max-new-tokens / --prompts
_parallel_size_or_len = _int_in(1, 1 << 31)  # --max-model-len


def _fraction(text: str) -> float:
    """An argparse type: a number in [0, 1) (`probe --tolerance`), a usage error (exit 2) otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


MODEL_HELP = "config.json, model folder, or hub id org/name[@revision] (HF cache first, then the hub)"


def _add_refresh_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--refresh", "--force-download", dest="refresh", action="store_true",
                   help="hub ids: ask the hub again and overwrite what the HF cache holds (huggingface_hub's "
                        "force_download); for a cached file that is damaged (SRG064)")


def _add_pair_args(p: argparse.ArgumentParser, required: bool = True, target_required: bool | None = None,
                   recipe_required: bool = True) -> None:
    p.add_argument("recipe", nargs=None if recipe_required else "?",
                   help="recipe file, or the name of a shipped recipe (see `surgery recipes`)")
    p.add_argument("--target", required=required if target_required is None else target_required, metavar="T",
                   help=f"target {MODEL_HELP}" + ("" if target_required is not False else
                                                  "; left out: a speculators draft's verifier"))
    p.add_argument("--draft", required=required, metavar="D", help=f"draft {MODEL_HELP}")
    p.add_argument("--patch", default=None, metavar="FILE", help="the draft as `surgery probe --write FILE` decided "
                   "it: a copy of --draft with the patch's config and weight edits is what runs (docs/probe.md)")
    _add_refresh_arg(p)
    p.add_argument("--pp", type=_parallel_size, default=1, metavar="N", help="pipeline-parallel size (default 1)")
    p.add_argument("--tp", type=_parallel_size, default=1, metavar="N", help="tensor-parallel size (default 1)")
    p.add_argument("--kv-cache-dtype", default="auto", metavar="X", help="KV-cache dtype: auto, fp8, fp8_e4m3, ...")
    p.add_argument("--attention-backend", default=None, metavar="B", help="attention backend name (vLLM)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _add_check_args(p: argparse.ArgumentParser) -> None:
    """validate / plan: the checks beyond the recipe's own (surgery/checks, docs/audit.md)."""
    p.add_argument("--weights", action="store_true", help="also check the safetensors headers of both folders "
                   "(no tensor data beyond bounded reads, which the output lists)")
    p.add_argument("--engine-check", action="store_true", help="also ask the engine itself: its config layer, then "
                   "the target and draft classes constructed on the meta device at --tp / --pp (no weights, no GPU); "
                   "with --weights, their shapes against the headers (surgery/engine/ask/, SRG760-SRG766)")
    p.add_argument("--engine-python", default=None, metavar="PATH", help="--engine-check: the python of an "
                   "environment that has the engine (default: this one, if it imports the engine)")
    p.add_argument("--method", default=None, metavar="M", help="speculative method the engine will be told "
                   "(vLLM: eagle, eagle3, mtp, draft_model, ...); checked against the draft")
    p.add_argument("--max-model-len", type=_parallel_size_or_len, default=None, metavar="N",
                   help="serving length (default: the target's max_position_embeddings)")
    p.add_argument("--hf-overrides", type=_json_object, default=None, metavar="JSON",
                   help="the dict --hf-overrides the target is served with (e.g. YaRN rope scaling)")
    p.add_argument("--num-speculative-tokens", type=_parallel_size, default=None, metavar="K",
                   help="draft tokens per step the engine will run (MTP: which layer serves which step; speculators: checked against proposal_methods[0])")
    p.add_argument("--draft-kv-cache-dtype", default=None, metavar="X",
                   help="speculative_config.kv_cache_dtype (default: the drafter inherits --kv-cache-dtype)")
    p.add_argument("--producer", default=None, metavar="P", help="who trained the draft, i.e. whose aux-layer-id "
                   "convention its ids are in (speculators, eagle, specforge, modelopt, sglang, vllm; default: from "
                   "the format's markers)")
    p.add_argument("--engine-version", default=None, metavar="V",
                   help="vLLM release the draft will be served by (e.g. 0.34.0): checks the draft-config keys and "
                   "the rules of that release (surgery/data/releases/vllm.json; default: the installed vLLM)")
    p.add_argument("--rejection-sample-method", default=None, metavar="M",
                   help="speculative_config.rejection_sample_method the engine runs (standard, block, fly, synthetic): "
                   "checked against the release; fly / synthetic void output-equals-greedy (SRG724)")
    p.add_argument("--calculate-kv-scales", action="store_true",
                   help="the engine runs with calculate_kv_scales=True (vLLM releases that have it): checked against "
                   "the KV-shared draft layers (SRG514) and the release (--engine-version)")
    p.add_argument("--decode-context-parallel-size", "--dcp", dest="decode_context_parallel_size", type=_parallel_size,
                   default=None, metavar="N", help="decode_context_parallel_size the engine runs (vLLM): checked against "
                   "block drafters per release (SRG804)")
    p.add_argument("--kv-scales-follow-target", action="store_true",
                   help="the plugin's fix for --calculate-kv-scales is selected (SURGERY_KV_SCALES=follow_target): "
                   "the draft layers take the target's calculated scales")


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="surgery", description="Wire speculative-decoding draft models into their targets, "
                     "from declarative recipes.", epilog=EPILOG_MAIN,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"spec-surgery {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add_parser in PARSERS:
        add_parser(sub)
    return parser


def _parser_validate_plan(sub) -> None:
    for name, summary, examples in (
            ("validate", "check a recipe against a draft/target pair (config.json only)",
             "  surgery validate gemma4-mtp --target T --draft D --pp 2\n"
             "  surgery validate my-recipe.yaml --target T --draft D --json | jq .ok"),
            ("plan", "resolve a recipe against a pair and print the plan (table, --json, or a Mermaid flowchart)",
             "  surgery plan gemma4-mtp --target T --draft D\n  surgery plan gemma4-mtp --target T --draft D --json\n"
             "  surgery plan gemma4-mtp --target T --draft D --format mermaid > plan.mmd")):
        p = sub.add_parser(name, help=summary, epilog=_epilog("examples:\n" + examples),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        _add_pair_args(p, target_required=False)
        p.add_argument("--engine", choices=list(ENGINES), default="vllm", help="engine the plan is for (default vllm)")
        p.add_argument("--device", default=None, metavar="DEV", help="device the engine will run on: cuda, cpu, rocm, "
                       "... (default: not known; a check that depends on it is then a note, SRG334, SRG351)")
        p.add_argument("--verbose", "-v", action="store_true", help="also print the notes (info diagnostics; --json "
                       "always has them)")
        if name == "plan":
            p.add_argument("--format", choices=PLAN_FORMATS, default=None,
                           help="table (default), json (the same as --json), or mermaid: the layer map(s) and the "
                           "shared modules as a Mermaid flowchart (GitHub, model cards)")
        _add_check_args(p)


def _parser_releases(sub) -> None:
    p = sub.add_parser("releases", help="the engine releases surgery's data covers, read from their wheels; with a "
                       "recipe and a pair: one verdict per vLLM release",
                       epilog=_epilog("examples:\n  surgery releases\n"
                                      "  surgery releases eagle3 --target T --draft D --method eagle3"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_pair_args(p, required=False, target_required=False, recipe_required=False)
    p.add_argument("--engine", choices=["vllm"], default="vllm", help="engine (vLLM: the per-release rules)")
    _add_check_args(p)


def _parser_explain(sub) -> None:
    p = sub.add_parser("explain", help="print the long form of a diagnostic code (all codes without one)",
                       epilog=_epilog("examples:\n  surgery explain SRG302\n  surgery explain --json", one="(not used)"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("code", nargs="?", help="e.g. SRG302")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def _parser_recipes(sub) -> None:
    p = sub.add_parser("recipes", help="list the shipped recipes (one row each, or NAME in full) and vLLM's "
                       "coverage by them",
                       epilog=_epilog("examples:\n  surgery recipes\n  surgery recipes eagle3\n"
                                      "  surgery recipes --verbose\n  surgery recipes --json", one="(not used)"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", metavar="NAME", help="a shipped recipe: print it in full (every target and "
                   "draft model type and architecture it applies to); an unknown name is SRG013")
    p.add_argument("--verbose", "-v", action="store_true", help="every recipe in full, and each method and "
                   "architecture of the coverage with what covers it or why nothing does")
    p.add_argument("--json", action="store_true", help="print JSON instead of text (with NAME: that recipe's row)")


def _parser_new(sub) -> None:
    p = sub.add_parser("new", help="write a starting recipe for a pair, from the closest shipped recipe",
                       description="Recognise a draft/target pair from its configs (model types, architectures) "
                       "and write a starting recipe from the closest shipped one, checked against the pair; or "
                       "say why no shipped recipe fits (SRG020).",
                       epilog=_epilog("examples:\n  surgery new --target path/to/target --draft path/to/draft "
                                      "--out my-recipe.yaml\n  surgery new --target T --draft D > my-recipe.yaml\n"
                                      "  surgery new --target T --draft D --json", one="no shipped recipe fits the pair"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True, metavar="T", help=f"target {MODEL_HELP}")
    p.add_argument("--draft", required=True, metavar="D", help=f"draft {MODEL_HELP}")
    _add_refresh_arg(p)
    p.add_argument("--out", metavar="FILE", help="write the recipe here (default: print it on stdout)")
    p.add_argument("--name", metavar="NAME", help="`recipe:` name of the new recipe (default: the shipped one's)")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument("--pp", type=_parallel_size, default=1, metavar="N", help="pipeline-parallel size to check (default 1)")
    p.add_argument("--tp", type=_parallel_size, default=1, metavar="N", help="tensor-parallel size to check (default 1)")
    p.add_argument("--kv-cache-dtype", default="auto", metavar="X", help="KV-cache dtype: auto, fp8, fp8_e4m3, ...")
    p.add_argument("--attention-backend", default=None, metavar="B", help="attention backend name (vLLM)")
    p.add_argument("--engine", choices=list(ENGINES), default="vllm", help="engine to check for (default vllm)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _parser_apply(sub) -> None:
    p = sub.add_parser("apply", help="load a pair with HF transformers, apply the recipe, verify, and check it "
                       "by speculative decoding", epilog="examples:\n  surgery apply recipes/gemma4-mtp.yaml\n"
                       "  surgery apply gemma4-mtp --ablate --json\n  surgery apply gemma4-mtp --target T --draft D "
                       "--device cuda --dtype bfloat16\n\n" + EXIT_CODES.format(
                           one="recipe or configs invalid, apply, verify or the decoding check failed"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_pair_args(p, required=False)
    p.add_argument("--device", default="auto", help="cpu, cuda, or auto (default)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16, float16 (default: float32 for hf and vllm; "
                   "bfloat16 for sglang, whose CUDA kernels take bf16 / fp16 only)")
    p.add_argument("--max-new-tokens", type=_positive_int, default=48, metavar="N")
    p.add_argument("--num-draft-tokens", type=_positive_int, default=None, metavar="K",
                   help="draft tokens per step (default 3; --engine vllm with a speculators head: the file's k)")
    p.add_argument("--prompts", type=_positive_int, default=8, metavar="N", help="number of built-in prompts to decode")
    p.add_argument("--threads", type=_positive_int, default=None, metavar="N",
                   help="torch intra-op threads on CPU (hf engine; default: 1 for models too small to split a matmul "
                   "across threads, such as the built-in pair, else torch's own default)")
    p.add_argument("--no-strict", action="store_true",
                   help="report operations HF cannot perform (SRG321) instead of failing on them (SRG322)")
    p.add_argument("--ablate", action="store_true", help="rerun the decoding check with each operation removed "
                   "(--engine vllm: each step undone on the live engine, then the pair's field rows of "
                   "surgery/data/pairs/ablations.yaml)")
    p.add_argument("--engine", choices=list(ENGINES), default="hf",
                   help="hf (default): transformers; vllm: real vLLM in this process, family's speculative method, "
                   "plugin applying the recipe; no --target/--draft: the family's built-in pair; --draft alone: a "
                   "speculators head is served as vLLM detects it (its verifier as the target, its k), any other "
                   "head against the built-in pair's target; sglang: on a CUDA device real SGLang (one child process "
                   "per engine, the recipe applied in its scheduler by the plugin); on CPU, where SGLang cannot run "
                   "speculative decoding, SRG360 with the blocker (docs/sglang.md)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")


def _parser_audit(sub) -> None:
    p = sub.add_parser("audit", help="start vLLM with its stock wiring, change nothing, and report how it differs "
                       "from the recipe", description="Start vLLM in-process with its own (stock) wiring, the "
                       "spec-surgery plugin in audit mode (SURGERY_MODE=audit: no changes), decode a few greedy "
                       "prompts, and report every difference between what vLLM built and the recipe's plan as a "
                       "coded finding (SRG7xx). docs/audit.md lists the checks.",
                       epilog="examples:\n  surgery audit gemma4-mtp --target T --draft D --kv-cache-dtype fp8\n"
                       "  surgery audit eagle3 --target T --draft D --json\n\n" + EXIT_CODES.format(
                           one="a finding that can change outputs or acceptance, or the audit did not run"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_pair_args(p)
    p.add_argument("--method", default=None, metavar="M", help="speculative method (default: the one the draft needs)")
    p.add_argument("--num-speculative-tokens", type=int, default=2, metavar="K")
    p.add_argument("--max-model-len", type=_parallel_size_or_len, default=512, metavar="N")
    p.add_argument("--max-tokens", type=int, default=16, metavar="N", help="tokens to decode per prompt")
    p.add_argument("--prompts", type=int, default=3, metavar="N", help="number of built-in token-id prompts")
    p.add_argument("--guard", action="store_true", help="also judge the stock engine's acceptance: the guard's "
                   "start-up canary (the built-in text prompts x --guard-tokens, greedy) with its rules and support "
                   "bound, against the built-in pair's measured expectation where the pair is the built-in one")
    p.add_argument("--guard-tokens", type=int, default=32, metavar="N", help="tokens per canary prompt (--guard)")
    p.add_argument("--engine-arg", action="append", metavar="KEY=VALUE",
                   help="extra vllm.LLM argument (value parsed as JSON when it is), repeatable")


def _parser_doctor(sub) -> None:
    p = sub.add_parser("doctor", help="check the environment a server would start in: plugin entry point, "
                       "engine version, hook targets, recipe, SURGERY_* variables",
                       description="Run with the server's interpreter and environment BEFORE `vllm serve` / "
                       "SGLang: the engines load spec-surgery only through an entry point, and a checkout on "
                       "PYTHONPATH that is not pip-installed has none (the engine then starts with no plugin, "
                       "silently). One line per check: ok, warning or error with a code and a hint.",
                       epilog=_epilog("examples:\n  surgery doctor\n  SURGERY_RECIPE=gemma4-mtp surgery doctor "
                                      "--engine vllm\n  surgery doctor --engine all --recipe eagle3 --json",
                                      one="a check found an error"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=["vllm", "sglang", "all"], default="vllm", help="engine whose plugin to "
                   "check (default vllm)")
    p.add_argument("--recipe", metavar="NAME_OR_PATH", default=None, help="recipe to load and schema-check "
                   "(default: SURGERY_RECIPE when set)")
    p.add_argument("--target", metavar="T", default=None, help=f"the server's target ({MODEL_HELP}): resolved and "
                   "pinned; with HF_HUB_OFFLINE, every file must be in the HF cache")
    p.add_argument("--draft", metavar="D", default=None, help=f"the server's draft ({MODEL_HELP}), as --target")
    _add_refresh_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _parser_convert(sub) -> None:
    p = sub.add_parser("convert", help="write a draft head in another published format (speculators, eagle, "
                       "modelopt): tensors copied byte for byte, aux ids translated, provenance recorded",
                       epilog=_epilog("examples:\n  surgery convert nvidia-head --to speculators out --target T\n"
                                      "  surgery convert head --to modelopt out --target T --json",
                                      one="conversion refused (it would lose or change meaning)"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("draft_dir", metavar="DRAFT_DIR", help="the draft head folder (config.json + weights)")
    p.add_argument("--to", required=True, choices=["speculators", "eagle", "modelopt"], help="format to write")
    p.add_argument("out_dir", metavar="OUT_DIR", help="output folder (written atomically)")
    p.add_argument("--target", metavar="T", help="target config.json or folder: its layer count translates ids; "
                   "named as the speculators verifier")
    p.add_argument("--producer", metavar="P", help="whose aux-id convention the source's ids are in (default: markers)")
    p.add_argument("--num-speculative-tokens", type=_positive_int, default=None, metavar="K",
                   help="k written into a speculators file (default: the source's, else 3)")
    p.add_argument("--force", action="store_true", help="replace an existing OUT_DIR (never `.`, `..`, a mount "
                   "point, or a parent of the current folder or of DRAFT_DIR)")
    p.add_argument("--config-only", action="store_true", help="write only config.json and the provenance, no "
                   "other file (a DRAFT_DIR without weights is an error without it)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _parser_pair(sub) -> None:
    p = sub.add_parser("pair", help="the built-in tiny pairs: list them, or export one as model folders",
                       epilog=_epilog("examples:\n  surgery pair list\n  surgery pair export gemma4-mtp /tmp/pair",
                                      one="(not used)"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    pair_sub = p.add_subparsers(dest="pair_command", metavar="ACTION", parser_class=_Parser, required=True)
    q = pair_sub.add_parser("list", help="the built-in pairs and the recipe each one demonstrates")
    q.add_argument("--json", action="store_true", help="print JSON instead of text")
    q = pair_sub.add_parser("export", help="write a built-in pair as DIR/target and DIR/draft (vLLM- and "
                            "transformers-ready folders, tokenizer included)")
    q.add_argument("name", metavar="NAME", help="shipped recipe name with a built-in pair (e.g. gemma4-mtp)")
    q.add_argument("dir", metavar="DIR", help="output folder (created); DIR/target and DIR/draft are written")
    q.add_argument("--force", action="store_true", help="replace existing DIR/target and DIR/draft")
    q.add_argument("--json", action="store_true", help="print one JSON object instead of text")


PLAN_FORMATS = ("table", "json", "mermaid")

def _parser_probe(sub) -> None:
    p = sub.add_parser("probe", help="settle by measured acceptance what the configs cannot say (aux-id convention, "
                       "norm_before_residual, aux ids absent, RoPE, own embedding / lm_head, d2t): one candidate per "
                       "answer, ranked with a margin",
                       epilog=_epilog("examples:\n  surgery probe gemma4-mtp --target T --draft D\n"
                                      "  surgery probe eagle3 --engine vllm --target T --draft D --prompts prompts.txt "
                                      "--write patch.yaml\n  surgery probe eagle3 --engine vllm --tune --tokens 128\n"
                                      "  surgery probe eagle3 --engine vllm --check --expect acceptance.csv",
                                      one="cannot probe (the engine refuses every candidate, or validate refuses the pair and no answer lifts it); --check: a regression"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe", help="recipe file, or the name of a shipped recipe (see `surgery recipes`)")
    p.add_argument("--target", default=None, metavar="T", help="target model folder (left out with --draft: the "
                   "recipe's built-in miniature pair)")
    p.add_argument("--draft", default=None, metavar="D", help="draft model folder")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--engine", choices=["hf", "vllm"], default=None, help="hf or vllm (default: the recipe's: hf for "
                   "Gemma 4 assistant pairs, which surgery's HF loader builds, vllm for every other pair)")
    p.add_argument("--prompts", default=None, metavar="FILE", help="one prompt per line (default: the built-in prompts)")
    p.add_argument("--max-prompts", type=_positive_int, default=None, metavar="N", help="decode the first N prompts only")
    p.add_argument("--tokens", type=_positive_int, default=48, metavar="N", help="tokens decoded per prompt (default 48)")
    p.add_argument("--num-draft-tokens", type=_positive_int, default=3, metavar="K", help="draft tokens per step (default 3)")
    p.add_argument("--device", default="cpu", help="hf engine: cpu or cuda (default cpu)")
    p.add_argument("--threads", type=_positive_int, default=None, metavar="N", help="hf engine on CPU: torch threads")
    p.add_argument("--card", default=None, help="the accelerator's name for the expectation's source (default cpu)")
    p.add_argument("--write", default=None, metavar="FILE", help="write the config patch, its provenance and the "
                   "measured expectation (guard.expect) as YAML; only when decided. validate, plan, audit and apply "
                   "take it back with --patch FILE")
    p.add_argument("--write-draft", default=None, metavar="DIR", help="with --write: also the patched draft folder "
                   "(what `vllm serve` with the plugin takes as the draft; unchanged weights linked)")
    p.add_argument("--no-early-stop", action="store_true", help="decode every prompt of every candidate")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    g = p.add_argument_group("modes: the pair as given, no question asked (docs/probe.md)")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--tune", action="store_true", help="choose num_speculative_tokens by measurement (vLLM): "
                      "per-position acceptance, the draft and verify step costs, the speed-up per k, the recommendation "
                      "with its interval and the engine flags")
    mode.add_argument("--check", action="store_true", help="acceptance regression check for CI: decode, compare with "
                      "the expectation per position; exit 1 on a regression")
    g.add_argument("--k-max", type=_positive_int, default=6, metavar="K", help="--tune: the longest draft measured "
                   "(default 6)")
    g.add_argument("--expect", default=None, metavar="FILE", help="--check: a speculators acceptance.csv, a --write "
                   "document, a recipe or an expect: mapping (default: the recipe's guard.expect, else the built-in pair's)")
    g.add_argument("--tolerance", type=_fraction, default=0.10, metavar="T", help="--check: relative tolerance beyond the "
                   "counts' noise (default 0.10)")
    g.add_argument("--acceptance-csv", default=None, metavar="FILE", help="--check / --tune: write the measured "
                   "per-position acceptance as speculators' acceptance.csv")
    g.add_argument("--subset", default=None, metavar="NAME", help="the acceptance.csv row read from --expect (default: "
                   "the only row, or all pooled) and the name of the row written")


#: each command's arguments, in `surgery --help`'s order; its handler is in COMMANDS
PARSERS = (_parser_validate_plan, _parser_releases, _parser_explain, _parser_recipes, _parser_new, _parser_apply,
           _parser_audit, _parser_doctor, _parser_convert, _parser_pair, _parser_probe)

#: command -> its handler, "module:function" (pip's `commands_dict`): imported when that command runs, so
#: the parser above is all `surgery --help` loads, and `validate` never imports what `apply` needs
COMMANDS = {"validate": "surgery.commands.validate:cmd_plan", "plan": "surgery.commands.validate:cmd_plan",
            "releases": "surgery.commands.releases:cmd_releases", "explain": "surgery.commands.explain:cmd_explain",
            "recipes": "surgery.commands.recipes:cmd_recipes", "new": "surgery.commands.new_recipe:cmd_new",
            "apply": "surgery.commands.apply:cmd_apply", "audit": "surgery.commands.audit:cmd_audit",
            "doctor": "surgery.commands.doctor:cmd_doctor", "convert": "surgery.commands.convert:cmd_convert",
            "pair": "surgery.commands.pair:cmd_pair",
            "probe": "surgery.commands.probe:cmd_probe"}


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as SIGINT is (issue 67): the same unwinding, so a download in flight removes
    its temporary file; exit 143."""


def _on_term(signum, frame):
    raise Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_term)
        try:
            return _main(argv)
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return _main(argv)


def _main(argv: Sequence[str] | None = None) -> int:
    out = EscapedOut(sys.stdout)  # every summary line escaped as diagnostics are (issue 67)
    parser = build_parser()
    given = list(argv if argv is not None else sys.argv[1:])
    wants_json = "--json" in given or "--format=json" in given or \
        any(a == "--format" and b == "json" for a, b in zip(given, given[1:]))
    ledger = sys.modules.get("surgery.hub.ledger")  # a command counts its own hub traffic
    if ledger is not None:
        ledger.LEDGER.reset()
    args = None
    try:
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help(out)
            return EXIT_USAGE
        handler = load_entry(COMMANDS[args.command])
        if getattr(args, "patch", None):  # the probe's decided wiring (issue 66): the draft is a patched copy
            with load_entry("surgery.probe.patch:patched_folder")(args.patch, args.draft) as folder:
                args.draft = folder
                return handler(args, out)
        if getattr(args, "refresh", False):
            from .hub import settings as hub_settings  # surgery.hub only for --refresh or a hub id

            hub_settings.set_refresh(True)
            try:
                return handler(args, out)
            finally:
                hub_settings.set_refresh(False)
        return handler(args, out)
    except SurgeryError as exc:
        if wants_json:
            out.write(json.dumps({"ok": False, "diagnostics": [d.to_dict() for d in exc.diagnostics]}, indent=2) + "\n")
        elif args is not None and args.command == "validate":  # validate's first line is always its verdict
            said = "INVALID" if exc.exit_code == EXIT_INVALID else "not checked"
            out.write(f"{said}: {args.recipe} ({counts(exc.diagnostics, verbose=True)})\n")
            out.flush()
        sys.stderr.write(render_diagnostics(exc.diagnostics, verbose=True))
        return exc.exit_code
    except ImportError as exc:  # an optional dependency missing deeper down than `require` looks (SRG070 / SRG071)
        command = " ".join(a for a in given[:2] if not a.startswith("-")) or "surgery"
        from .extras import from_import_error  # the error path only (tests/test_architecture.py LAZY_MODULES)

        found = from_import_error(exc, command)
        if found is None:
            raise
        if wants_json:
            out.write(json.dumps({"ok": False, "diagnostics": [found.to_dict()]}, indent=2) + "\n")
        sys.stderr.write(render_diagnostics([found], verbose=True))
        return SurgeryError(found).exit_code
    except Terminated:
        return 143
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
