"""The outside check of issue 68's fourth catalogue: every report of ../shared/FIELD.md "Catalogue 4" marked C,
built again on real public configs that the tests for its code do not use, run through `surgery validate --json`
(in-process: surgery.cli.main, the CLI's own entry point), and scored by whether a code of the report's row in
docs/audit.md "Fourth catalogue" fires at error or warning severity with a message that names the report.

    python bench/catalogue4_outside.py [--out bench/results/catalogue4_outside.json]

Each case: the target config, the draft config edited as the report describes (the edit is recorded), the
engine settings (release, method, k, --hf-overrides, --pp, --dcp, ...), and a control where one exists (the
unedited config or setting: the row's code must not fire there at error / warning). A case whose release does
the right thing (the report's failure is fixed there) is a release control: its expected verdict is a note or
nothing, and it is counted apart from the report cases.

Outcomes: `caught` (an error / warning of the row's codes that names the report), `caught, not named` (an
error / warning of the row's codes without the report's name), `note only` (the row's codes at info only),
`missed` (none of the row's codes).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import io
import json
import shlex
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from surgery.cli import main  # noqa: E402

VERDICTS = ROOT / "tests" / "verdicts" / "configs"   # verbatim public configs (each file's _source says where)
CONFIGS = ROOT / "tests" / "data" / "configs"
DATA = ROOT / "tests" / "data"
SHARED = ROOT.parent / "shared" / "configs"
YARN_QWEN3 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}  # Qwen3 model cards

# What the outside check found and what was done about it (docs/audit.md "Fourth catalogue", the outside check).
NOTES = [
    "46488-peagle-0.32 was missed (SRG806 silent) and 51581-qwen3.6-dflash-fp8-0.30 a note only (SRG802): "
    "catalogue4.yaml had rows for 0.26.0 / 0.34.0 only, and a release with no row was silent (SRG806) or 'not read' "
    "(SRG802), though every wheel 0.25.0-0.33.0 has 0.26's peagle reader (algos.py: two of four flags) and 0.25.0-0.30.0 "
    "0.26's unguarded fused K/V F.linear (0.31.0 guards it). Fixed: rows for every wheel 0.25.0-0.34.0, each derived "
    "again from its wheel by tests/checks/test_catalogue4.py.",
    "30456 on Nemotron-H-Puzzle-MTP (simulated pre-fix data) was missed: SGLang rewrites a NemotronHPuzzleForCausalLM "
    "draft to NemotronHForCausalLMMTP like NemotronHForCausalLM's (model_config.py, every wheel), the rule named the "
    "latter only. Fixed: catalogue4.yaml sglang.nemotron_h_mtp_shared.architectures.",
    "44697-mimo-7b-pp2-0.26 was caught, not named: a non-SupportsPP MTP class is refused at start (SRG344 error), and "
    "the refusal named no report though vllm#46994's first point is that refusal. Fixed (c5fb881): SRG344 on an MTP "
    "draft under --pp names vllm#44697, #44698, #52295, #46994; caught and named.",
    "Every DeepSeek-V4 DSpark case (41834-v4-*, 48381-v4-dspark-dcp2-0.26, the SpecForge#800 rows) had false errors "
    "besides its own finding: SRG204 and SRG674, the dspark recipe admitting no deepseek_v4 draft and asking "
    "Qwen3DSparkModel's markov_rank (fixed 31a0274: vLLM builds DSparkDraftModel / DSparkV41DraftModel and reads "
    "dspark_markov_rank / dspark_target_layer_ids, per release); and under --weights SRG609, an EAGLE-3 fc looked for "
    "where DeepSeek-V4's drafter has none (fixed 846ee2f: its loader's mtp.<i>.main_proj is judged). Seen on the "
    "way and fixed with them: vLLM 0.25.x with --device rocm / xpu has no such class (SRG675, 809efb8), and "
    "--engine sglang gave the published config false SRG776 / SRG362 (855a5f6: SGLang reads dspark_markov_rank "
    "first and captures the last layer's output itself).",
    "50170 and 9795 are notes by design (docs/audit.md): the config cannot tell the ids (issue 53); vLLM keeps a "
    "DFlash draft's own head, and `--engine` has no vllm-ascend (the library's rule errs, recorded under extra).",
    "The tests added with the fixes use the configs of the cases that found them (as the fixes' tests must).",
]

# The configs the tests for each code use (before this check's fixes added theirs) (tests/checks/test_catalogue4*.py, test_catalogue3.py,
# test_dspark_v4_own_vocab.py, test_field_checks.py, test_engine_start.py, test_vllm_rewrites.py, ...):
# the cases below pick others.
TESTS_USE = {
    "SRG800": ["tests/data/configs/Qwen3-8B.json", "tests/verdicts/configs/specforge-qwen3-8b-dspark.json"],
    "SRG801": ["tests/data/configs/Qwen3-8B.json", "tests/verdicts/configs/torchspec-qwen3_8b_dflash.json",
               "tests/verdicts/configs/specforge-qwen3-8b-dflash.json", "tests/verdicts/configs/specforge-qwen3-8b-dspark.json"],
    "SRG802": ["tests/data/configs/Qwen3-8B.json", "tests/verdicts/configs/specforge-qwen3-8b-dflash.json"],
    "SRG803": ["tests/data/catalogue4/MiniMax-M2.5.config.json", "tests/verdicts/configs/specforge-llama3-8B-eagle3.json",
               "tests/data/configs/Llama-3.1-8B-Instruct.json"],
    "SRG804": ["tests/data/configs/Qwen3-8B.json", "tests/verdicts/configs/specforge-qwen3-8b-dflash.json",
               "tests/verdicts/configs/specforge-qwen3-8b-dspark.json"],
    "SRG805": ["tests/data/configs/nemotron_h/Nemotron-H-MTP.json", "tests/data/configs/DeepSeek-V3.json"],
    "SRG344": ["tests/data/configs/DeepSeek-V3.json", "tests/data/configs/nemotron_h/Nemotron-H-Omni-MTP.json",
               "tests/verdicts/configs/Qwen3.5-27B.json", "tests/data/configs/GLM-4.5-Air.json",
               "tests/data/configs/Llama-3.1-8B-Instruct.json", "tests/data/configs/EAGLE3-LLaMA3.1-Instruct-8B.json",
               "tests/data/configs/EAGLE-LLaMA3.1-Instruct-8B.json"],
    "SRG806": ["tests/data/formats/speculators-llama3.1-8b-eagle3/config.json", "tests/data/configs/Llama-3.1-8B-Instruct.json"],
    "SRG807": ["tests/verdicts/configs/gpt-oss-120b.json", "tests/verdicts/configs/specforge-gpt-oss-120B-eagle3.json"],
    "SRG808": ["tests/data/configs/nemotron_h/Nemotron-H-MTP.json"],
    "SRG809": ["tests/data/catalogue4/DeepSeek-V4-Flash-DSpark.config.json"],
    "SRG618": ["tests/data/configs/Qwen3-8B.json", "tests/verdicts/configs/specforge-qwen3-8b-dflash.json",
               "tests/verdicts/configs/specforge-qwen3-8b-dspark.json", "tests/data/catalogue3/specforge-qwen3-8b-dspark-draftvocab32k.json",
               "tests/data/configs/Llama-3.1-8B-Instruct.json", "tests/data/configs/EAGLE3-LLaMA3.1-Instruct-8B.json",
               "tests/data/configs/gemma-4-E2B-it.json", "tests/data/configs/gemma-4-E2B-it-assistant.json"],
    "SRG622": ["tests/data/configs/Qwen3-8B.json", "tests/verdicts/configs/specforge-qwen3-8b-dflash.json",
               "tests/data/catalogue3/specforge-qwen3-8b-dspark-draftvocab32k.json"],
    "SRG640": ["tests/data/configs/Llama-3.1-8B-Instruct.json", "tests/data/configs/EAGLE3-LLaMA3.1-Instruct-8B.json",
               "tests/verdicts/configs/specforge-llama3-8B-eagle3.json"],
    "SRG647": ["tests/data/configs/Qwen3-8B.json", "tests/verdicts/configs/specforge-qwen3-8b-dspark.json",
               "tests/data/configs/DeepSeek-V3.json"],
}


def rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p.resolve().relative_to(ROOT.parent)) if ROOT.parent in p.resolve().parents else str(p)


def load(path: Path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}


def provenance(path: Path) -> str:
    """verbatim / reconstructed / derived, as the file's _confidence or _source says (tests/data/*/SOURCES.md)."""
    raw = json.loads(path.read_text())
    if raw.get("_confidence"):
        return str(raw["_confidence"])
    source = str(raw.get("_source", "")).lower()
    for word in ("verbatim", "reconstructed", "derived"):
        if source.startswith(word) or source.startswith(f"{word}:") or f"{word} copy" in source:
            return word
    if "sources.md" in source or source.startswith("tests/data/"):
        return "derived"
    return UNMARKED.get(rel(path), "fixture (no _source)")


# files that carry no _source / _confidence of their own
UNMARKED = {
    "tests/data/hub/meta-llama__Llama-3.1-8B-Instruct/config.json": "verbatim (tests/data/hub/SOURCES.md: sha256 matches)",
    "tests/data/realsize/speculators/llama-3.1-8b-eagle3.json": "fixture (no _source: a speculators Eagle3Speculator "
                                                                 "file for Llama-3.1-8B, speculators_version 0.1.0.dev13)",
}


# ------------------------------------------------------------------------------------------- the cases

@dataclass
class Config:
    """A config: the real file it comes from, and how it was edited (None: as published)."""
    base: Path
    edit: Callable[[dict], dict] | None = None
    says: str = ""  # the edit in words
    weights: Callable[[], dict] | None = None  # tensors of a tiny safetensors header (SRG809), or None


@dataclass
class Case:
    id: str
    report: str
    names: list[str]            # the strings a message must hold to name the report
    codes: list[str]            # the codes of the report's row (docs/audit.md)
    recipe: str
    target: Config
    draft: Config
    args: list[str]
    expect: str = "caught"      # caught | fixed (the release does the right thing) | by design: note
    why: str = ""
    control: dict | None = None  # {"args": [...]} and / or {"draft": Config}: the row's code must stay quiet
    patch: Callable | None = None  # a context manager around the run (simulated release data)
    extra: Callable | None = None


def v(name: str) -> Path:
    return VERDICTS / name


def dspark_markov_top(cfg: dict) -> dict:
    """SpecForge's DSpark with markov_rank moved to the top level, where vLLM reads it (SRG681's fix)."""
    cfg = json.loads(json.dumps(cfg))
    cfg["markov_rank"] = cfg["dflash_config"].pop("markov_rank")
    return cfg


def drop(*keys: str) -> Callable[[dict], dict]:
    def f(cfg: dict) -> dict:
        return {k: val for k, val in cfg.items() if k not in keys}
    return f


def minimax_head(cfg: dict) -> dict:
    """SpecForge's Qwen3-235B EAGLE-3 head at MiniMax-M2.5's widths, as the MiniMax heads are published (no ids)."""
    cfg = dict(cfg)
    cfg.pop("eagle_config", None)
    cfg.update(hidden_size=3072, num_attention_heads=48, num_key_value_heads=8, head_dim=128, vocab_size=200064,
               rope_theta=5000000, max_position_embeddings=196608)
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        cfg.pop(k, None)
    return cfg


def automodel_dflash(target: Path, arch: str = "DFlashDraftModel", **extra) -> Callable[[dict], dict]:
    """NeMo Automodel's DFlash export (nemo_automodel/components/speculative/dflash/draft_qwen3.py
    build_qwen3_dflash_draft_config): the target's config dict with 5 full-attention layers, block_size 16 and a
    dflash_config of mask_token_id / target_layer_ids, no `causal` key (Automodel#3235). Automodel names the class
    Qwen3DFlashDraftModel; the architecture vLLM's registry serves (DFlashDraftModel) is written here."""
    def f(_: dict) -> dict:
        cfg = load(target)
        L = cfg["num_hidden_layers"]
        n = 5
        ids = [int(round(1 + i * (L - 3 - 1) / (n - 1))) for i in range(n)]  # build_target_layer_ids
        cfg.update(architectures=[arch], num_hidden_layers=n, layer_types=["full_attention"] * n, max_window_layers=n,
                   num_target_layers=L, block_size=16,
                   dflash_config={"mask_token_id": 151669, "target_layer_ids": ids}, **extra)
        return cfg
    return f


def v4_dspark(model_type: str | None = None) -> Callable[[dict], dict]:
    """A DeepSeek-V4 config with the DSpark fields DeepSeek-V4-Flash-DSpark publishes (dspark_block_size 5,
    dspark_noise_token_id 128799, dspark_target_layer_ids [40, 41, 42], dspark_markov_rank 256)."""
    def f(cfg: dict) -> dict:
        cfg = dict(cfg, dspark_block_size=5, dspark_noise_token_id=128799, dspark_target_layer_ids=[40, 41, 42],
                   dspark_markov_rank=256)
        if model_type:
            cfg["model_type"] = model_type
        return cfg
    return f


HIDDEN, VOCAB = 4, 8


def _rand(shape, seed):
    import random
    r = random.Random(seed)
    n = 1
    for d in shape:
        n *= d
    return shape, [r.uniform(-1, 1) for _ in range(n)]


def v4_tensors(own: list[str]) -> Callable[[], dict]:
    """A tiny DeepSeek-V4 header: the target's embed / head, a few main and DSpark stage tensors, and the stage
    tensors `own` (SpecForge#800's mtp.0.embed / mtp.2.head, or DeepSeek's MTP name mtp.{i}.emb.tok_emb) with
    values of their own (not the target's)."""
    def f() -> dict:
        t = {"embed.weight": _rand([VOCAB, HIDDEN], 101), "head.weight": _rand([VOCAB, HIDDEN], 102),
             "layers.0.attn.wkv.weight": _rand([HIDDEN, HIDDEN], 103),
             "mtp.0.main_proj.weight": _rand([HIDDEN, 3 * HIDDEN], 104), "mtp.0.main_norm.weight": _rand([HIDDEN], 105),
             "mtp.1.attn.wkv.weight": _rand([HIDDEN, HIDDEN], 106)}
        for i, name in enumerate(own):
            t[name] = _rand([VOCAB, HIDDEN], 200 + i)
        return t
    return f


def write_safetensors(path: Path, tensors: dict) -> None:
    header, blobs, offset = {}, [], 0
    for name, (shape, values) in tensors.items():
        data = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


@contextlib.contextmanager
def sglang_without_nemotron_fix():
    """A release whose wheel lacks sglang#30456's fix, as tests/checks/test_catalogue4_sglang.py simulates it (no
    wheel read, 0.5.16-0.5.23, lacks it): the release data says `keeps_shared: null`."""
    from surgery.checks import catalogue4_sglang

    real = catalogue4_sglang._fixes
    catalogue4_sglang._fixes = lambda r, rule: {"keeps_shared": None} if rule == "nemotron_h_mtp_shared" else real(r, rule)
    try:
        yield
    finally:
        catalogue4_sglang._fixes = real


def vllm_ascend_library(case_dir: Path) -> dict:
    """The vllm-ascend rule of SRG622 is in the library only (`--engine` has no vllm-ascend)."""
    from surgery.checks.catalogue3 import lm_head_rule_check
    from surgery.facts.fromconfig import facts_from_config

    d = facts_from_config(json.loads((case_dir / "draft.json").read_text()), "d")
    t = facts_from_config(json.loads((case_dir / "target.json").read_text()), "t")
    out = lm_head_rule_check(d, t, method="dflash", engine="vllm-ascend", version=None)
    return {"call": "surgery.checks.catalogue3.lm_head_rule_check(..., engine='vllm-ascend')",
            "findings": [{"code": x.code, "severity": x.severity, "names_report": "vllm-ascend#9795" in x.message
                          or "vllm-ascend#11374" in x.message} for x in out]}


def cases() -> list[Case]:
    q35_27 = v("Qwen3.5-27B.json")
    q36_dflash = v("specforge-qwen3.6-27b-dflash.json")
    q36_dspark = v("specforge-qwen3.6-27b-dspark.json")
    q35_35 = v("Qwen3.5-35B-A3B.json")
    q35_35_dflash = v("specforge-qwen3.5-35b-a3b-dflash.json")
    v4_dspark_cfg = DATA / "catalogue4" / "DeepSeek-V4-Flash-DSpark.config.json"
    v4_nvfp4 = DATA / "catalogue3" / "deepseek-v4-flash-nvfp4.config.json"
    same = Config(Path())  # marker: the draft is the target's own file (MTP / DeepSeek-V4 DSpark layout)
    pp_reports = ["vllm#44697", "vllm#44698", "vllm#52295", "vllm#46994"]
    out = [
        # ---------------------------------------------------------------- vllm#41834: DSpark k past its block
        Case("41834-v4-k7-0.26", "vllm#41834", ["vllm#41834"], ["SRG800"], "dspark",
             Config(v4_dspark_cfg), same, ["--method", "dspark", "--num-speculative-tokens", "7", "--engine-version", "0.26.0"],
             why="the report's own setting: DeepSeek-V4-Flash-DSpark (dspark_block_size 5) at k 7",
             control={"args": ["--method", "dspark", "--num-speculative-tokens", "5", "--engine-version", "0.26.0"]}),
        Case("41834-v4-k7-0.34", "vllm#41834", ["vllm#41834"], ["SRG800"], "dspark",
             Config(v4_dspark_cfg), same, ["--method", "dspark", "--num-speculative-tokens", "7", "--engine-version", "0.34.0"],
             control={"args": ["--method", "dspark", "--num-speculative-tokens", "5", "--engine-version", "0.34.0"]}),
        Case("41834-qwen3.6-dspark-k20-0.34", "vllm#41834", ["vllm#41834"], ["SRG800"], "dspark",
             Config(q35_27), Config(q36_dspark, dspark_markov_top, "markov_rank moved to the top level (SRG681's fix)"),
             ["--num-speculative-tokens", "20", "--engine-version", "0.34.0"],
             why="SpecForge's Qwen3.6-27B DSpark (block_size 16) at k 20",
             control={"args": ["--num-speculative-tokens", "16", "--engine-version", "0.34.0"]}),
        # -------------------------------------------------- vllm#46488, vllm#38111: norm flags the reader drops
        Case("46488-peagle-0.26", "vllm#46488, vllm#38111", ["vllm#46488", "vllm#38111"], ["SRG806"], "peagle",
             Config(DATA / "hub" / "meta-llama__Llama-3.1-8B-Instruct" / "config.json"),
             Config(DATA / "realsize" / "speculators" / "llama-3.1-8b-eagle3.json",
                    lambda c: dict(c, speculators_model_type="peagle", fc_norm=True, norm_output=True, mask_token_id=128002,
                                   speculators_config=dict(c["speculators_config"], algorithm="peagle")),
                    "as a P-EAGLE speculators file (speculators#610 wires norm_output through P-EAGLE) with "
                    "fc_norm / norm_output true"),
             ["--engine-version", "0.26.0"],
             control={"draft": Config(DATA / "realsize" / "speculators" / "llama-3.1-8b-eagle3.json",
                                      lambda c: dict(c, speculators_model_type="peagle", mask_token_id=128002,
                                                     speculators_config=dict(c["speculators_config"], algorithm="peagle")),
                                      "P-EAGLE, no fc_norm / norm_output")}),
        Case("46488-peagle-0.32", "vllm#46488, vllm#38111", ["vllm#46488", "vllm#38111"], ["SRG806"], "peagle",
             Config(DATA / "hub" / "meta-llama__Llama-3.1-8B-Instruct" / "config.json"),
             Config(DATA / "realsize" / "speculators" / "llama-3.1-8b-eagle3.json",
                    lambda c: dict(c, speculators_model_type="peagle", fc_norm=True, norm_output=True, mask_token_id=128002,
                                   speculators_config=dict(c["speculators_config"], algorithm="peagle")),
                    "as a P-EAGLE speculators file with fc_norm / norm_output true"),
             ["--engine-version", "0.32.0"],
             why="0.32 (the installed vLLM here): its peagle reader (algos.py:71-74) carries the same two flags as 0.26's"),
        Case("46488-eagle3-0.26", "vllm#46488, vllm#38111", ["vllm#46488", "vllm#38111"], ["SRG806"], "eagle3",
             Config(DATA / "hub" / "meta-llama__Llama-3.1-8B-Instruct" / "config.json"),
             Config(DATA / "realsize" / "speculators" / "llama-3.1-8b-eagle3.json",
                    lambda c: dict(c, norm_before_fc=True, fc_norm=True, norm_output=True), "EAGLE-3.1 flags true"),
             ["--engine-version", "0.26.0"], expect="fixed",
             why="every wheel read (0.25-0.34) has both fixes in its eagle3 reader (algos.py carries all four flags)"),
        # ---------------------------------------------------------- sglang#32226 -> #32334: gpt-oss Eagle3-v3
        Case("32226-gpt-oss-20b-0.5.16", "sglang#32226 -> #32334", ["sglang#32226", "sglang#32334"], ["SRG807"], "eagle3",
             Config(v("gpt-oss-20b.json")),
             Config(v("specforge-gpt-oss-20B-eagle3.json"),
                    lambda c: dict(c, eagle_config={"eagle_aux_hidden_state_layer_ids": [16, 20, 24], "norm_before_fc": True}),
                    "eagle_config as v3 ships it, scaled to 24 layers: boundaries [16, 20, 24] (24 = L), norm_before_fc"),
             ["--engine", "sglang", "--engine-version", "0.5.16", "--method", "EAGLE3", "--max-model-len", "4096"],
             why="no gpt-oss-20b v3 head config is public here: the 120b head's boundaries [24, 30, 36] at the same"
                 " fractions of 24 layers",
             control={"draft": Config(v("specforge-gpt-oss-20B-eagle3.json"), None, "the SpecForge head as published")}),
        Case("32226-gpt-oss-20b-norm-only-0.5.16", "sglang#32226 -> #32334", ["sglang#32226", "sglang#32334"], ["SRG807"],
             "eagle3", Config(v("gpt-oss-20b.json")),
             Config(v("specforge-gpt-oss-20B-eagle3.json"),
                    lambda c: dict(c, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 11, 20], "norm_before_fc": True}),
                    "eagle_config with SpecForge's output ids [1, 11, 20] and norm_before_fc true"),
             ["--engine", "sglang", "--engine-version", "0.5.16", "--method", "EAGLE3", "--max-model-len", "4096"]),
        Case("32226-gpt-oss-20b-0.5.20", "sglang#32226 -> #32334", ["sglang#32226", "sglang#32334"], ["SRG807"], "eagle3",
             Config(v("gpt-oss-20b.json")),
             Config(v("specforge-gpt-oss-20B-eagle3.json"),
                    lambda c: dict(c, eagle_config={"eagle_aux_hidden_state_layer_ids": [16, 20, 24], "norm_before_fc": True}),
                    "v3's eagle_config at 24 layers"),
             ["--engine", "sglang", "--engine-version", "0.5.20", "--method", "EAGLE3", "--max-model-len", "4096"],
             expect="fixed", why="0.5.17+ reads eagle_config's boundaries and norm_before_fc"),
        # ----------------------------------------------------------------- vllm#43671: capture per target class
        Case("43671-minimax-qwen235-head-0.26", "vllm#43671", ["vllm#43671"], ["SRG803"], "eagle3",
             Config(DATA / "catalogue4" / "MiniMax-M2.5.config.json"),
             Config(v("specforge-qwen3-235B-A22B-eagle3.json"), minimax_head,
                    "SpecForge's Qwen3-235B EAGLE-3 head at MiniMax-M2.5's widths, its eagle_config ids dropped"),
             ["--engine-version", "0.26.0"],
             why="MiniMax-M2.5 is the only MiniMaxM2ForCausalLM config here (the test's target too): the head differs",
             control={"draft": Config(v("specforge-qwen3-235B-A22B-eagle3.json"),
                                      lambda c: dict(minimax_head(c), eagle_aux_hidden_state_layer_ids=[3, 32, 60]),
                                      "the same head stating the shifted ids")}),
        Case("43671-minimax-qwen235-head-0.34", "vllm#43671", ["vllm#43671"], ["SRG803"], "eagle3",
             Config(DATA / "catalogue4" / "MiniMax-M2.5.config.json"),
             Config(v("specforge-qwen3-235B-A22B-eagle3.json"), minimax_head, "as above"),
             ["--engine-version", "0.34.0"]),
        # ------------------------------------------------------------------ vllm#50170: ids guessed (a note)
        Case("50170-llama3.3-70b-0.34", "vllm#50170", ["vllm#50170"], ["SRG640"], "eagle3",
             Config(v("Llama-3.3-70B-Instruct.json")),
             Config(DATA / "engine_check" / "EAGLE3-LLaMA3.3-Instruct-70B.json", drop("eagle_aux_hidden_state_layer_ids"),
                    "no eagle_aux_hidden_state_layer_ids (as the report's head)"),
             ["--engine-version", "0.34.0"], expect="by design: note",
             why="docs/audit.md: SRG640 note, the default is also every known trainer's default (issue 53): the config"
                 " cannot tell"),
        # ---------------------------------------------- vllm-ascend#9795 -> #11374, #9946: DFlash's own head
        Case("9795-qwen3.5-35b-dflash-32k-0.26", "vllm-ascend#9795 -> #11374, #9946",
             ["vllm-ascend#9795", "vllm-ascend#11374", "vllm-ascend#9946"], ["SRG622"], "dflash",
             Config(q35_35), Config(q35_35_dflash, lambda c: dict(c, draft_vocab_size=32000), "draft_vocab_size 32000"),
             ["--engine-version", "0.26.0"], expect="by design: note",
             why="the failure is vllm-ascend's; vLLM keeps the draft's head (the right thing): a note naming the reports."
                 " `--engine` has no vllm-ascend (the library's rule is recorded under extra)",
             extra=vllm_ascend_library),
        # ------------------------------------------------------------------ sglang#30456: NemotronH MTP filter
        Case("30456-nemotron-puzzle-0.5.23", "sglang#30456", ["sglang#30456"], ["SRG808"], "mtp",
             Config(CONFIGS / "nemotron_h" / "Nemotron-H-Puzzle-MTP.json"), same,
             ["--engine", "sglang", "--engine-version", "0.5.23", "--method", "NEXTN", "--max-model-len", "4096"],
             expect="fixed", why="every SGLang wheel read (0.5.16-0.5.23) holds the fix"),
        Case("30456-nemotron-puzzle-prefix", "sglang#30456", ["sglang#30456"], ["SRG808"], "mtp",
             Config(CONFIGS / "nemotron_h" / "Nemotron-H-Puzzle-MTP.json"), same,
             ["--engine", "sglang", "--engine-version", "0.5.23", "--method", "NEXTN", "--max-model-len", "4096"],
             why="SIMULATED release data: a wheel without the fix (none read lacks it), as the test simulates it; SGLang"
                 " serves NemotronHPuzzleForCausalLM's MTP through the same filter (model_config.py, every wheel)",
             patch=sglang_without_nemotron_fix),
        # -------------------------------------------------------------- SpecForge#742 / --hf-overrides YaRN
        Case("742-hf-overrides-qwen3-32b-eagle3", "SpecForge#742 (target YaRN through --hf-overrides)", ["SpecForge#742"],
             ["SRG618"], "eagle3", Config(v("Qwen3-32B.json")), Config(v("specforge-qwen3-32b-eagle3.json")),
             ["--engine-version", "0.34.0", "--hf-overrides", json.dumps({"rope_scaling": YARN_QWEN3})],
             why="Qwen3-32B served with its model card's YaRN through --hf-overrides; the head as published",
             control={"args": ["--engine-version", "0.34.0"]}),
        Case("742-rope-parameters-only-qwen3-30b", "SpecForge#742 (rope_parameters-only export)", ["SpecForge#742"],
             ["SRG618"], "eagle3",
             Config(v("Qwen3-30B-A3B.json"), lambda c: dict(c, rope_scaling=dict(YARN_QWEN3)), "YaRN in the file (model card)"),
             Config(v("specforge-qwen3-30B-A3B-eagle3.json"),
                    lambda c: {**drop("rope_scaling", "rope_theta")(c),
                               "rope_parameters": {"rope_type": "default", "rope_theta": c["rope_theta"]}},
                    "as transformers 5 save_pretrained writes it: rope_parameters only (rope_type default), no rope_scaling"),
             ["--engine-version", "0.34.0"],
             control={"draft": Config(v("specforge-qwen3-30B-A3B-eagle3.json"),
                                      lambda c: dict(c, rope_scaling=dict(YARN_QWEN3)), "the head with the target's YaRN")}),
        Case("742-rope-parameters-only-dflash-0.26", "SpecForge#742 (rope_parameters-only export)", ["SpecForge#742"],
             ["SRG618"], "dflash",
             Config(v("Qwen3-32B.json"), lambda c: dict(c, rope_scaling=dict(YARN_QWEN3)), "YaRN in the file (model card)"),
             Config(v("Qwen3-32B.json"),
                    lambda c: {**drop("rope_scaling", "rope_theta")(automodel_dflash(v("Qwen3-32B.json"))(c)),
                               "rope_parameters": {"rope_type": "default", "rope_theta": c["rope_theta"]}},
                    "a DFlash drafter built from Qwen3-32B's config (Automodel's export), rope_parameters only"),
             ["--engine-version", "0.26.0"]),
        # ------------------------------------------------------------ Automodel#3267: no rope_theta in the draft
        Case("3267-qwen3.6-dflash-no-theta", "Automodel#3267", ["Automodel#3267"], ["SRG618"], "dflash",
             Config(q35_27), Config(q36_dflash, drop("rope_theta"), "rope_theta dropped (rope_scaling null kept)"),
             ["--engine-version", "0.34.0"], control={"draft": Config(q36_dflash)}),
        Case("3267-qwen3-235b-eagle3-no-theta", "Automodel#3267", ["Automodel#3267"], ["SRG618"], "eagle3",
             Config(v("Qwen3-235B-A22B.json")),
             Config(v("specforge-qwen3-235B-A22B-eagle3.json"), drop("rope_theta"), "rope_theta dropped (rope_scaling null kept)"),
             ["--engine-version", "0.26.0"], control={"draft": Config(v("specforge-qwen3-235B-A22B-eagle3.json"))}),
        # --------------------------------------------------------------- Automodel#3235: DFlash causal dropped
        Case("3235-automodel-dflash-qwen3-32b-0.34", "Automodel#3235", ["Automodel#3235"], ["SRG801"], "dflash",
             Config(v("Qwen3-32B.json")), Config(v("Qwen3-32B.json"), automodel_dflash(v("Qwen3-32B.json")),
                                                 "Automodel's DFlash export of Qwen3-32B, no dflash_config.causal"),
             ["--engine-version", "0.34.0"],
             control={"draft": Config(v("Qwen3-32B.json"), lambda c: {
                 **automodel_dflash(v("Qwen3-32B.json"))(c),
                 "dflash_config": dict(automodel_dflash(v("Qwen3-32B.json"))(c)["dflash_config"], causal=True)},
                 "the same export with dflash_config.causal true")}),
        Case("3235-automodel-dflash-qwen3-30b-0.26", "Automodel#3235", ["Automodel#3235"], ["SRG801"], "dflash",
             Config(v("Qwen3-30B-A3B.json")), Config(v("Qwen3-30B-A3B.json"), automodel_dflash(v("Qwen3-30B-A3B.json")),
                                                     "Automodel's DFlash export of Qwen3-30B-A3B, no dflash_config.causal"),
             ["--engine-version", "0.26.0"]),
        # ------------------------------------------------------- tokenspeed#1012: FP8 KV cache with no scales
        Case("1012-qwen3.6-dspark-fp8-0.34", "lightseekorg/tokenspeed#1012", ["tokenspeed#1012"], ["SRG647"], "dspark",
             Config(q35_27), Config(q36_dspark, dspark_markov_top, "markov_rank at the top level"),
             ["--kv-cache-dtype", "fp8", "--engine-version", "0.34.0"],
             control={"args": ["--kv-cache-dtype", "fp8", "--draft-kv-cache-dtype", "auto", "--engine-version", "0.34.0"]}),
        Case("1012-qwen3.5-35b-dflash-fp8-0.26", "lightseekorg/tokenspeed#1012", ["tokenspeed#1012"], ["SRG647"], "dflash",
             Config(q35_35), Config(q35_35_dflash), ["--kv-cache-dtype", "fp8", "--engine-version", "0.26.0"]),
        # ----------------------------------------------------------------------------- vllm#48381: DCP
        Case("48381-qwen3.6-dflash-dcp2-0.26", "vllm#48381", ["vllm#48381"], ["SRG804"], "dflash",
             Config(q35_27), Config(q36_dflash), ["--tp", "8", "--dcp", "2", "--engine-version", "0.26.0"],
             why="Qwen3.5-27B has 4 KV heads: tp 8, dcp 2 passes the GQA rule, so the draft is what fails",
             control={"args": ["--tp", "8", "--engine-version", "0.26.0"]}),
        Case("48381-v4-dspark-dcp2-0.26", "vllm#48381", ["vllm#48381"], ["SRG804"], "dspark",
             Config(v4_dspark_cfg), same, ["--method", "dspark", "--tp", "8", "--dcp", "2", "--engine-version", "0.26.0"]),
        Case("48381-qwen3.6-dflash-dcp2-0.34", "vllm#48381", ["vllm#48381"], ["SRG804"], "dflash",
             Config(q35_27), Config(q36_dflash), ["--tp", "8", "--dcp", "2", "--engine-version", "0.34.0"],
             expect="fixed", why="0.34 gives a non-MLA block drafter DCP 1"),
        # --------------------------------------------------------------------- MTP under PP (four reports)
        Case("44697-glm4.7-flash-pp2-0.26", "vllm#44697, #44698, #52295, #46994", pp_reports, ["SRG805", "SRG344"], "mtp",
             Config(CONFIGS / "glm4_moe_lite" / "GLM-4.7-Flash.json"), same, ["--pp", "2", "--engine-version", "0.26.0"],
             control={"args": ["--engine-version", "0.26.0"]}),
        Case("44697-nemotron-puzzle-pp2-0.28", "vllm#44697, #44698, #52295, #46994", pp_reports, ["SRG805", "SRG344"],
             "mtp", Config(CONFIGS / "nemotron_h" / "Nemotron-H-Puzzle-MTP.json"), same,
             ["--pp", "2", "--engine-version", "0.28.0"],
             why="0.27-0.29 still give the draft the target's pipeline size (release data classes.draft_pp)"),
        Case("44697-mimo-7b-pp2-0.26", "vllm#44697, #44698, #52295, #46994", pp_reports, ["SRG805", "SRG344"], "mtp",
             Config(v("MiMo-7B-Base.json")), same, ["--pp", "2", "--engine-version", "0.26.0"],
             why="a class without SupportsPP: 0.26 refuses at start (vllm#46994's first point), SRG344 by the row"),
        Case("44697-glm4.7-flash-pp2-0.34", "vllm#44697, #44698, #52295, #46994", pp_reports, ["SRG805", "SRG344"], "mtp",
             Config(CONFIGS / "glm4_moe_lite" / "GLM-4.7-Flash.json"), same, ["--pp", "2", "--engine-version", "0.34.0"],
             expect="fixed", why="0.34 runs the draft at pp 1 on the last stage"),
        # ---------------------------------------------------------------- vllm#51581: quantised DFlash drafter
        Case("51581-qwen3.6-dflash-fp8-0.26", "vllm#51581", ["vllm#51581"], ["SRG802"], "dflash",
             Config(q35_27), Config(q36_dflash, lambda c: dict(c, quantization_config={
                 "quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}),
                 "an fp8 (block 128) quantization_config"),
             ["--engine-version", "0.26.0"], control={"draft": Config(q36_dflash)}),
        Case("51581-qwen3.5-35b-dflash-awq-0.26", "vllm#51581", ["vllm#51581"], ["SRG802"], "dflash",
             Config(q35_35), Config(q35_35_dflash, lambda c: dict(c, quantization_config={
                 "quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}), "an AWQ 4-bit quantization_config"),
             ["--engine-version", "0.26.0"]),
        Case("51581-qwen3.6-dflash-fp8-0.30", "vllm#51581", ["vllm#51581"], ["SRG802"], "dflash",
             Config(q35_27), Config(q36_dflash, lambda c: dict(c, quantization_config={
                 "quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}), "fp8"),
             ["--engine-version", "0.30.0"],
             why="0.30's qwen3_dflash.py builds the same fused K/V F.linear as 0.26's (473-474, 546-547)"),
        Case("51581-qwen3.5-35b-dflash-awq-0.34", "vllm#51581", ["vllm#51581"], ["SRG802"], "dflash",
             Config(q35_35), Config(q35_35_dflash, lambda c: dict(c, quantization_config={
                 "quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}), "AWQ"),
             ["--engine-version", "0.34.0"], expect="fixed", why="0.31+ runs quantised projections through their method"),
        # ------------------------------------------------------- SpecForge#800: DSpark-V4's own embed / head
        Case("800-v4-nvfp4-cuda-0.34", "SpecForge#800", ["SpecForge#800"], ["SRG809"], "dspark",
             Config(v4_nvfp4, v4_dspark(), "the DSpark fields DeepSeek-V4-Flash-DSpark publishes",
                    weights=v4_tensors(["mtp.0.embed.weight", "mtp.2.head.weight"])), same,
             ["--method", "dspark", "--weights", "--device", "cuda", "--engine-version", "0.34.0"],
             why="NVIDIA's NVFP4 DeepSeek-V4 config (derived: tests/data/catalogue3/SOURCES.md) with the DSpark fields;"
                 " a tiny header with the stage tensors SpecForge#800 names",
             control={"draft": Config(v4_nvfp4, v4_dspark(), "no own embed / head in the header", weights=v4_tensors([]))}),
        Case("800-v4-nvfp4-xpu-0.26", "SpecForge#800", ["SpecForge#800"], ["SRG809"], "dspark",
             Config(v4_nvfp4, v4_dspark(), "DSpark fields", weights=v4_tensors(["mtp.0.embed.weight", "mtp.2.head.weight"])),
             same, ["--method", "dspark", "--weights", "--device", "xpu", "--engine-version", "0.26.0"],
             why="XPU loads and skips them: the values differ from the target's (a warning)"),
        Case("800-v41-emb-tok-emb-xpu-0.34", "SpecForge#800", ["SpecForge#800"], ["SRG809"], "dspark",
             Config(v4_nvfp4, v4_dspark("deepseek_v41"), "DSpark fields, model_type deepseek_v41 (the V4.1 export it quotes)",
                    weights=v4_tensors(["mtp.1.emb.tok_emb.weight", "mtp.2.head.weight"])), same,
             ["--method", "dspark", "--weights", "--device", "xpu", "--engine-version", "0.34.0"],
             why="V4.1's package has no XPU class of its own (the CUDA one: KeyError); DeepSeek's MTP name emb.tok_emb"),
    ]
    return out


# -------------------------------------------------------------------------------------------- the runs

def materialise(cfg: Config, where: Path, name: str) -> Path:
    raw = load(cfg.base)
    if cfg.edit:
        raw = cfg.edit(raw)
    if cfg.weights is not None:
        folder = where / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(raw))
        write_safetensors(folder / "model.safetensors", cfg.weights())
        return folder
    p = where / f"{name}.json"
    p.write_text(json.dumps(raw))
    return p


def run(argv: list[str], patch=None) -> tuple[int, dict]:
    out, err = io.StringIO(), io.StringIO()
    with (patch() if patch else contextlib.nullcontext()), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    try:
        return rc, json.loads(out.getvalue())
    except json.JSONDecodeError:
        raise SystemExit(f"no JSON from {argv}: rc {rc}\n{err.getvalue()[-2000:]}")


def score(diags: list[dict], case: Case) -> tuple[str, list[dict]]:
    row = [{"code": d["code"], "severity": d["severity"], "names_report": any(n in d["message"] for n in case.names),
            "message": d["message"]} for d in diags if d["code"] in case.codes]
    loud = [r for r in row if r["severity"] in ("error", "warning")]
    if any(r["names_report"] for r in loud):
        return "caught", row
    if loud:
        return "caught, not named", row
    if row:
        return "note only", row
    return "missed", row


def validate(case: Case, target: Path, draft: Path, args: list[str]) -> tuple[list[str], int, dict]:
    argv = ["validate", case.recipe, "--target", target, "--draft", draft, *args, "--json"]
    rc, out = run(argv, case.patch)
    return argv, rc, out


def shown(argv: list[str], names: dict[str, str]) -> str:
    words = []
    for a in argv:
        s = str(a)
        for path, label in names.items():
            s = s.replace(path, label)
        words.append(s)
    return "surgery " + " ".join(shlex.quote(w) for w in words)


def run_case(case: Case, tmp: Path) -> dict:
    d = tmp / case.id
    d.mkdir()
    target = materialise(case.target, d, "target")
    draft = target if case.draft.base == Path() else materialise(case.draft, d, "draft")
    names = {str(target): f"<target: {rel(case.target.base)}{' edited' if case.target.edit else ''}>"}
    if draft != target:
        names[str(draft)] = f"<draft: {rel(case.draft.base)}{' edited' if case.draft.edit else ''}>"
    argv, rc, out = validate(case, target, draft, case.args)
    outcome, row = score(out["diagnostics"], case)
    rowd = {
        "id": case.id, "report": case.report, "codes_of_the_row": case.codes, "expect": case.expect, "why": case.why,
        "target": {"file": rel(case.target.base), "provenance": provenance(case.target.base), "edit": case.target.says or None},
        "draft": ({"file": "the target's own file (one config, as the engine serves it)"} if case.draft.base == Path() else
                  {"file": rel(case.draft.base), "provenance": provenance(case.draft.base), "edit": case.draft.says or None}),
        "settings": [str(a) for a in case.args],
        "command": shown(argv, names), "exit_code": rc,
        "diagnostics": [f"{x['code']}:{x['severity']}" for x in out["diagnostics"] if x["severity"] != "info"
                        or x["code"] in case.codes],
        "row_findings": row, "outcome": outcome,
        "named": any(r["names_report"] for r in row),
    }
    if case.expect == "caught":
        rowd["as_expected"] = outcome == "caught"
    else:  # a release that does the right thing, or a note by design: nothing louder than a note
        rowd["as_expected"] = outcome in ("note only", "missed")
    if case.control:
        cdraft = draft
        if "draft" in case.control:
            cdraft = materialise(case.control["draft"], d, "control-draft")
            names[str(cdraft)] = f"<control draft: {rel(case.control['draft'].base)}>"
        cargs = case.control.get("args", case.args)
        cargv, crc, cout = validate(case, target, cdraft, cargs)
        coutcome, crow = score(cout["diagnostics"], case)
        rowd["control"] = {"what": (case.control["draft"].says or "as published") if "draft" in case.control else
                           "settings: " + " ".join(cargs), "command": shown(cargv, names),
                           "row_findings": [f"{r['code']}:{r['severity']}" for r in crow],
                           "quiet": coutcome in ("note only", "missed")}
    if case.extra:
        rowd["extra"] = case.extra(d)
    return rowd


def main_(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "catalogue4_outside.json"))
    a = ap.parse_args(argv)
    all_cases = cases()
    with tempfile.TemporaryDirectory(prefix="c4-outside-") as tmp:
        rows = [run_case(c, Path(tmp)) for c in all_cases]
    reports = [r for r in rows if r["expect"] != "fixed"]
    fixed = [r for r in rows if r["expect"] == "fixed"]
    count = lambda rs, o: sum(r["outcome"] == o for r in rs)  # noqa: E731
    summary = {
        "cases": len(rows),
        "report_cases": len(reports),
        "caught": count(reports, "caught"),
        "caught_but_not_named": count(reports, "caught, not named"),
        "note_only": count(reports, "note only"),
        "missed": count(reports, "missed"),
        "note_by_design": sum(r["expect"] == "by design: note" for r in reports),
        "release_controls": len(fixed),
        "release_controls_as_expected": sum(r["as_expected"] for r in fixed),
        "controls_quiet": f"{sum(r['control']['quiet'] for r in rows if 'control' in r)}/{sum('control' in r for r in rows)}",
        "reports_covered": sorted({r["report"].split(" (")[0] for r in rows}),
    }
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = None
    result = {"command": "python bench/catalogue4_outside.py" + ("" if a.out.endswith("bench/results/catalogue4_outside.json")
                                                                  else f" --out {a.out}"),
              "date": _dt.date.today().isoformat(), "commit": commit,
              "entry": "surgery.cli.main(['validate', ..., '--json']) in-process (the `surgery` console script's entry)",
              "tests_use": TESTS_USE, "summary": summary, "notes": NOTES, "rows": rows}
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    w = max(len(r["id"]) for r in rows)
    print(f"{'case':<{w}}  {'expect':<16} {'outcome':<18} {'named':<5} {'ctl':<4} row findings")
    for r in rows:
        ctl = "" if "control" not in r else ("ok" if r["control"]["quiet"] else "LOUD")
        print(f"{r['id']:<{w}}  {r['expect']:<16} {r['outcome']:<18} {str(r['named']):<5} {ctl:<4} "
              + ", ".join(f"{x['code']}:{x['severity']}" for x in r["row_findings"]) + ("" if r["as_expected"] else "  <- not as expected"))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
