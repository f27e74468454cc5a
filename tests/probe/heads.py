"""Deliberately mislabelled heads on the built-in miniature pairs, with their ground truth (issue 57).

Each head is a copy of a built-in draft folder with its config.json changed; the weights stay the
truth (what the head was trained on). `truth` names the answer the probe must pick when it decides
(a substring of the winning candidate's name), or None when measurement cannot know it (then only
"undecided" is right). `healthy` heads are the shipped wiring: the probe must not change them.
Used by tests/probe/catalogue.py (issue 66: these heads and 23 more), tests/probe/test_catalogue.py,
bench/probe_catalogue.py and bench/probe_cpu.py (issue 57's table)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

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
    truth: str | tuple | None = None  # substring(s) of the right answer(s); None: only undecided / cannot probe is right
    healthy: bool = False
    speculators: bool = False  # convert the draft to the speculators format first (surgery convert)
    what: str = ""
    weights: Callable | None = None  # (draft tensors, target tensors) -> the draft's new tensors


OWN_EMB = "the draft's own input_embeddings"
TARGETS_EMB = "the target's input_embeddings"
TARGETS_HEAD = "the target's lm_head"
D2T_ABS = "d2t as absolute"
D2T_OFF = "d2t as offsets"


def _gen(seed: int):
    import torch

    return torch.Generator().manual_seed(seed)


def embed_perturbed(scale: float):
    """The draft ships the target's embedding plus noise (an export that perturbed or re-initialised
    its copy): the head was trained with the target's."""
    def edit(d, t):
        import torch

        e = t["model.embed_tokens.weight"]
        d["embed_tokens.weight"] = (e + scale * e.std() * torch.randn(e.shape, generator=_gen(7))).contiguous()
        return d
    return edit


def embed_random(d, t):
    """An export's random init (TorchSpec#38): N(0, 0.02) where the target's embedding belongs."""
    import torch

    e = t["model.embed_tokens.weight"]
    d["embed_tokens.weight"] = (0.02 * torch.randn(e.shape, generator=_gen(11))).contiguous()
    return d


def lm_head_perturbed(d, t):
    import torch

    w = t["lm_head.weight"]
    d["lm_head.weight"] = (w + 0.5 * w.std() * torch.randn(w.shape, generator=_gen(13))).contiguous()
    return d


def _perm(n: int):
    import torch

    return torch.randperm(n, generator=_gen(17))


def embed_finetune_eagle3(d, t):
    """A fine-tune the head was trained with: the target's embedding with its channels permuted, and
    the head's weights that read it (input_layernorm, the embedding half of q/k/v) permuted alike;
    the head computes exactly what the shipped one does with its own, nothing like it with the target's."""
    e = t["model.embed_tokens.weight"]
    p = _perm(e.shape[1])
    d["embed_tokens.weight"] = e[:, p].contiguous()
    d["midlayer.input_layernorm.weight"] = d["midlayer.input_layernorm.weight"][p].contiguous()
    h = e.shape[1]
    for proj in ("q_proj", "k_proj", "v_proj"):
        w = d[f"midlayer.self_attn.{proj}.weight"].clone()
        w[:, :h] = w[:, :h][:, p]
        d[f"midlayer.self_attn.{proj}.weight"] = w.contiguous()
    return d


def embed_finetune_eagle(d, t):
    """EAGLE-1: fc reads cat(embedding, hidden): its embedding columns permuted with the embedding's."""
    e = t["model.embed_tokens.weight"]
    p = _perm(e.shape[1])
    d["embed_tokens.weight"] = e[:, p].contiguous()
    w = d["fc.weight"].clone()
    h = e.shape[1]
    w[:, :h] = w[:, :h][:, p]
    d["fc.weight"] = w.contiguous()
    return d


def d2t_absolute(d, t):
    """d2t exported as absolute target ids (d2t[i] = target id) where the engine reads offsets."""
    import torch

    d["d2t"] = (d["d2t"] + torch.arange(d["d2t"].shape[0], dtype=d["d2t"].dtype)).contiguous()
    return d


def d2t_every_other(d, t):
    """A head over every other draft token (64 of 128, lm_head rows kept): its true offsets
    (target(2j) - j) grow strictly, so they also read as a valid absolute map: the offsets are the truth."""
    import torch

    keep = torch.arange(0, d["d2t"].shape[0], 2)
    targets = keep + d["d2t"][keep]
    d["d2t"] = (targets - torch.arange(keep.shape[0])).contiguous()
    d["lm_head.weight"] = d["lm_head.weight"][keep].contiguous()
    t2d = torch.zeros_like(d["t2d"])
    t2d[targets] = True
    d["t2d"] = t2d
    return d


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
    # the draft's own embedding / lm_head: a fine-tune (keep it) or a copy (the target's)
    Head("eagle3-embed-perturbed", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA, truth=TARGETS_EMB,
         weights=embed_perturbed(0.5), what="ships the target's embedding + noise (0.5 std): trained on the target's"),
    Head("eagle3-embed-random", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA, truth=TARGETS_EMB,
         weights=embed_random, what="ships a random-init embedding (TorchSpec#38)"),
    Head("eagle3-embed-finetune", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA, truth=OWN_EMB,
         weights=embed_finetune_eagle3, what="ships its own (channel-permuted) embedding, trained with it"),
    Head("eagle-embed-perturbed", "eagle", "vllm", PAIRS / "eagle/draft", LLAMA, truth=TARGETS_EMB,
         weights=embed_perturbed(0.5), what="ships the target's embedding + noise"),
    Head("eagle-embed-finetune", "eagle", "vllm", PAIRS / "eagle/draft", LLAMA, truth=OWN_EMB,
         weights=embed_finetune_eagle, what="ships its own (channel-permuted) embedding, fc trained with it"),
    Head("dflash-embed-perturbed", "dflash", "vllm", PAIRS / "dflash/draft", LLAMA, truth=TARGETS_EMB,
         weights=embed_perturbed(0.5), what="ships the target's embedding + noise"),
    Head("peagle-lm-head-perturbed", "peagle", "vllm", PAIRS / "peagle/draft", LLAMA, truth=TARGETS_HEAD,
         weights=lm_head_perturbed, what="ships the target's lm_head + noise (full vocabulary: shareable)"),
    # d2t: offsets (what vLLM reads) or absolute ids
    Head("eagle3-d2t-absolute", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA, truth=D2T_ABS,
         weights=d2t_absolute, what="d2t exported as absolute target ids; valid as offsets too (vocab 264)"),
    Head("eagle3-outputs-d2t-absolute", "eagle3", "vllm", PAIRS / "eagle3-outputs/draft", LLAMA, truth=D2T_ABS,
         weights=d2t_absolute, what="the second head's d2t as absolute ids"),
    Head("eagle3-d2t-offsets-both-valid", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA,
         {"draft_vocab_size": 64}, truth=D2T_OFF, weights=d2t_every_other,
         what="every other draft token kept: true offsets that also read as a valid absolute map"),
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
    if head.weights is not None:
        from safetensors.torch import load_file, save_file

        (f,) = sorted(folder.glob("*.safetensors"))
        save_file(head.weights(load_file(str(f)), load_file(str(head.target / "model.safetensors"))), str(f),
                  metadata={"format": "pt"})
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


def truths(head: Head) -> tuple[str, ...]:
    return (head.truth,) if isinstance(head.truth, str) else tuple(head.truth or ())


def verdict(head: Head, result: dict) -> str:
    """'recovered' | 'confirmed' | 'undecided' | 'cannot probe' | 'WRONG' for a probe result against the
    head's truth (issue 66's status: decided (changed / confirmed), undecided, cannot probe). A decision is
    right when every truth substring names the winning candidate or an answer it decided (an answer fixed
    without measuring is not in the candidate's name); a healthy head must be decided and confirmed."""
    dec = result["decision"]
    if dec["status"] == "undecided":
        return "undecided"
    if dec["status"] == "cannot probe":
        return "cannot probe"
    if head.healthy:
        return "confirmed" if dec.get("outcome") == "confirmed" else "WRONG"
    if not truths(head):
        return "WRONG"  # nothing measurable says the truth: only undecided or cannot probe is right
    said = " | ".join([dec.get("candidate", "")] + [a.get("name", "") for a in (dec.get("answers") or {}).values()])
    return "recovered" if all(t in said for t in truths(head)) else "WRONG"


def run(head: Head, folder: Path, prompts: int = 8, tokens: int = 48, k: int = 3, expected: bool = True) -> dict:
    """The probe on one head, in this process, on the head's engine, with the pair's held-out prompts and (with
    `expected`) the pair's recorded expectation, a 48-token figure: a shorter decode reads under it (SRG503)."""
    from surgery.tinymodels.bytevocab import encode
    from surgery.pairs import builtin_pair, held_out_prompts
    from surgery.commands.probe import engine_device, validate_findings
    from surgery.probe.expected import expected_for
    from surgery.probe.runner import ProbeInput, probe
    from surgery.recipe import load_recipe

    recipe = load_recipe(head.recipe)
    pair = builtin_pair(head.recipe)
    if head.engine == "hf":
        from surgery.probe.measure_hf import HFMeasurer

        texts = held_out_prompts()
        measurer = HFMeasurer(recipe, head.target, threads=1)
    else:
        from surgery.probe.measure_vllm import VLLMMeasurer

        texts = pair.prompts
        extra = {"parallel_drafting": True} if pair.info.get("parallel_drafting") else None
        measurer = VLLMMeasurer(recipe, head.target, pair.method, extra)
    device = engine_device(head.engine)
    inp = ProbeInput(recipe, head.target, folder, [encode(t) for t in texts[:prompts]], "builtin", tokens, k,
                     validate_findings(recipe, folder, head.target, device),
                     validate=lambda f: validate_findings(recipe, f, head.target, device),
                     method=pair.method if pair is not None else None,
                     expected=expected_for(recipe, pair, head.engine) if expected else None)
    return probe(inp, measurer)


def own_traceback(err: str) -> bool:
    """A traceback the command printed (at a line's start); vLLM's logger quotes some of its own warnings'
    tracebacks inside its log lines ("(MainProcess pid=...) WARNING ... Traceback"), which are not ours."""
    return any(line.startswith("Traceback (most recent call last)") for line in err.splitlines())
