"""Deliberately mislabelled heads on the built-in miniature pairs, with their ground truth (issue 57).

Each head is a copy of a built-in draft folder with its config.json changed; the weights stay the
truth (what the head was trained on). `truth` names the answer the probe must pick when it decides
(a substring of the winning candidate's name), or None when measurement cannot know it (then only
"undecided" is right). `healthy` heads are the shipped wiring: the probe must not change them.
Used by tests/probe/test_probe_engines.py and bench/probe_cpu.py."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAIRS = REPO / "surgery" / "data" / "pairs"
TINY = REPO / "surgery" / "data" / "tiny" / "weights"
LLAMA = PAIRS / "llama-target"
DROP = "__drop__"
TARGETS = "the target's RoPE"


@dataclass(frozen=True)
class Head:
    id: str
    recipe: str
    engine: str
    draft: Path
    target: Path
    edits: dict = field(default_factory=dict)  # key -> value (DROP: remove); dotted keys reach nested mappings
    truth: str | None = None  # substring of the right answer's candidate name; None: only undecided is right
    healthy: bool = False
    speculators: bool = False  # convert the draft to the speculators format first (surgery convert)
    what: str = ""


ROPE_LINEAR = {"rope_type": "linear", "factor": 8.0, "rope_theta": 10000.0}
ROPE_THETA = {"rope_type": "default", "rope_theta": 1000000.0}

HEADS = (
    # EAGLE-3 (vLLM): aux-id conventions, ids absent, norm_before_residual, RoPE
    Head("eagle3-shipped", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA, healthy=True,
         what="shipped head, ids [0, 7, 8]: only vLLM's reading names layers the target has"),
    Head("eagle3-outputs-shipped", "eagle3", "vllm", PAIRS / "eagle3-outputs/draft", LLAMA, healthy=True,
         what="second head, ids [1, 7, 8] in vLLM's convention"),
    Head("eagle3-ids-specforge", "eagle3", "vllm", PAIRS / "eagle3-outputs/draft", LLAMA,
         {"eagle_aux_hidden_state_layer_ids": [0, 6, 7]}, truth="vLLM ids [1, 7, 8]",
         what="trained on vLLM [1, 7, 8], ids written in SpecForge's convention (one layer early), unmarked"),
    Head("eagle3-ids-dropped", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA,
         {"eagle_aux_hidden_state_layer_ids": DROP}, truth=None,
         what="ids dropped: no producer default is [0, 7, 8], nothing to compare"),
    Head("eagle3-outputs-ids-dropped", "eagle3", "vllm", PAIRS / "eagle3-outputs/draft", LLAMA,
         {"eagle_aux_hidden_state_layer_ids": DROP}, truth=None, what="ids dropped from the second head"),
    Head("eagle3-speculators-norm-dropped", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA,
         {"norm_before_residual": DROP}, truth="norm_before_residual false", speculators=True,
         what="speculators export without norm_before_residual: vLLM builds true, trained false"),
    Head("eagle3-speculators-shipped", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA, speculators=True,
         healthy=True, what="speculators export with norm_before_residual false written"),
    Head("eagle3-rope-linear", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA, {"rope_parameters": ROPE_LINEAR},
         truth=TARGETS, what="another model's linear RoPE scaling (factor 8) written into the head"),
    Head("eagle3-rope-theta", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA, {"rope_parameters": ROPE_THETA},
         truth=TARGETS, what="rope_theta 1e6 written where the target (and the training) used 1e4"),
    # EAGLE-1 (vLLM)
    Head("eagle-shipped", "eagle", "vllm", PAIRS / "eagle/draft", LLAMA, healthy=True),
    Head("eagle-rope-linear", "eagle", "vllm", PAIRS / "eagle/draft", LLAMA, {"rope_parameters": ROPE_LINEAR},
         truth=TARGETS),
    Head("eagle-rope-theta", "eagle", "vllm", PAIRS / "eagle/draft", LLAMA, {"rope_parameters": ROPE_THETA},
         truth=TARGETS),
    # DFlash (vLLM)
    Head("dflash-shipped", "dflash", "vllm", PAIRS / "dflash/draft", LLAMA, healthy=True),
    Head("dflash-rope-linear", "dflash", "vllm", PAIRS / "dflash/draft", LLAMA, {"rope_parameters": ROPE_LINEAR},
         truth=TARGETS),
    Head("dflash-rope-theta", "dflash", "vllm", PAIRS / "dflash/draft", LLAMA, {"rope_parameters": ROPE_THETA},
         truth=TARGETS),
    # P-EAGLE (vLLM, parallel drafting)
    Head("peagle-shipped", "peagle", "vllm", PAIRS / "peagle/draft", LLAMA, healthy=True),
    Head("peagle-rope-linear", "peagle", "vllm", PAIRS / "peagle/draft", LLAMA, {"rope_parameters": ROPE_LINEAR},
         truth=TARGETS),
    Head("peagle-rope-theta", "peagle", "vllm", PAIRS / "peagle/draft", LLAMA, {"rope_parameters": ROPE_THETA},
         truth=TARGETS),
    # Gemma 4 MTP assistant (HF)
    Head("gemma4-shipped", "gemma4-mtp", "hf", TINY / "draft", TINY / "target", healthy=True),
    Head("gemma4-rope-dropped", "gemma4-mtp", "hf", TINY / "draft", TINY / "target",
         {"text_config.rope_parameters.full_attention": {"rope_type": "default", "rope_theta": 10000.0}},
         truth=TARGETS, what="full-attention proportional RoPE (theta 1e6, partial 0.25) dropped to the default"),
    Head("gemma4-rope-sliding-theta", "gemma4-mtp", "hf", TINY / "draft", TINY / "target",
         {"text_config.rope_parameters.sliding_attention": {"rope_type": "default", "rope_theta": 1000000.0}},
         truth=TARGETS, what="sliding-window layers' theta 1e4 written as 1e6"),
    Head("gemma4-rope-linear", "gemma4-mtp", "hf", TINY / "draft", TINY / "target",
         {"text_config.rope_parameters.sliding_attention": {"rope_type": "linear", "factor": 8.0,
                                                            "rope_theta": 10000.0}},
         truth=TARGETS, what="another model's linear scaling on the sliding-window layers"),
)


def build(head: Head, dest: Path) -> Path:
    """The head's folder under `dest`: the built-in draft (converted to speculators if asked) with the edits."""
    folder = dest / head.id
    if head.speculators:
        subprocess.run([sys.executable, "-m", "surgery", "convert", str(head.draft), "--to", "speculators",
                        str(folder), "--target", str(head.target), "--producer", "vllm"], check=True,
                       capture_output=True, cwd=REPO)
    else:
        shutil.copytree(head.draft, folder)
    cfg_path = folder / "config.json"
    cfg = json.loads(cfg_path.read_text())
    for key, value in head.edits.items():
        *path, last = key.split(".")
        node = cfg
        for part in path:
            node = node[part]
        if value == DROP:
            node.pop(last, None)
        else:
            node[last] = value
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return folder


def verdict(head: Head, result: dict) -> str:
    """'recovered' | 'confirmed' | 'undecided' | 'WRONG' for a probe result against the head's truth."""
    dec = result["decision"]
    if dec["status"] == "undecided":
        return "undecided"
    if head.healthy:
        return "confirmed" if dec["status"] in ("confirmed", "nothing to decide") else "WRONG"
    if head.truth is None or dec["status"] not in ("changed", "confirmed"):
        return "WRONG"
    return "recovered" if head.truth in dec.get("candidate", "") else "WRONG"


def run(head: Head, folder: Path, prompts: int = 8, tokens: int = 48, k: int = 3) -> dict:
    """The probe on one head, in this process, on the head's engine, with the pair's held-out prompts."""
    from surgery.bytevocab import encode
    from surgery.pairs import builtin_pair, held_out_prompts
    from surgery.commands.probe import validate_findings
    from surgery.probe.runner import ProbeInput, probe
    from surgery.recipe import load_recipe

    recipe = load_recipe(head.recipe)
    if head.engine == "hf":
        from surgery.probe.measure_hf import HFMeasurer

        texts = held_out_prompts()
        measurer = HFMeasurer(recipe, head.target, threads=1)
    else:
        from surgery.probe.measure_vllm import VLLMMeasurer

        pair = builtin_pair(head.recipe)
        texts = pair.prompts
        extra = {"parallel_drafting": True} if pair.info.get("parallel_drafting") else None
        measurer = VLLMMeasurer(recipe, head.target, pair.method, extra)
    inp = ProbeInput(recipe, head.target, folder, [encode(t) for t in texts[:prompts]], "builtin", tokens, k,
                     validate_findings(recipe, folder, head.target))
    return probe(inp, measurer)
