"""Wrong wiring on purpose, in a live vLLM engine (`surgery apply RECIPE --engine vllm --ablate`).

An ablation row (surgery/data/pairs/ablations.yaml) says what users hit in the field and how to
reproduce it on the built-in pair; this module performs the `rewire:` kind, on the live drafter,
right after vLLM's own wiring (a load_model "after" hook) and before the KV caches are bound:

- ``target``: the draft's module for the role becomes the target's module (vllm#28549: a drafter's
  own lm_head overwritten by the target's; on a reduced-vocabulary EAGLE-3 head that is a
  264-row head where 128 rows and a d2t map are expected);
- ``random``: the draft gets its own module for the role, never loaded: a copy of the module
  now wired there with its weight drawn from a seeded normal (std 0.02). That is what a step
  removed leaves: an EAGLE-3 checkpoint without lm_head (sglang#27908, accept rate 0.00), an
  MTP layer whose embedding was not shared under pipeline parallelism. vLLM itself allocates such
  a parameter with ``torch.empty``; its contents would make the row irreproducible, hence the seed.

A role the draft has no module for is an error (SRG460), never a row that changed nothing.
"""
from __future__ import annotations

import copy
from typing import Any

from ..engine.cards import card
from ..live.paths import get_path, has_path, role_paths, split_parent
from ..text.diagnostics import SurgeryError, diag

KINDS = ("target", "random")
MAX_LAYER = 512  # per-layer roles (`{i}`, an MTP layer's shared_head): indices probed on the draft
INIT_STD = 0.02


def _first(root: Any, candidates: list[str]) -> str | None:
    return next((c for c in candidates if has_path(root, c)), None)


def role_sites(draft: Any, target: Any, role: str) -> list[tuple[str, str]]:
    """(draft path, target path) of every place the role lives on the live models; per-layer roles
    give one site per layer the draft has."""
    entry = card("vllm").roles.get(role)
    if entry is None:
        raise SurgeryError(diag("SRG460", f"ablation rewires role {role!r}, which has no vLLM module "
                                "(the vLLM engine card's roles, surgery/data/engines/vllm.yaml)", hint="use a role listed there"))
    per_layer = any("{i}" in c for c in entry.draft)
    layers = range(MAX_LAYER) if per_layer else (None,)
    sites = []
    for i in layers:
        d = _first(draft, role_paths("vllm", role, "draft", i) or [])
        t = _first(target, role_paths("vllm", role, "target", i) or [])
        if d is not None and t is not None:
            sites.append((d, t))
    if not sites:
        raise SurgeryError(diag("SRG460", f"ablation rewires role {role!r} but the draft {type(draft).__name__} "
                                "has no module for it", hint="the row does not fit this pair: fix ablations.yaml"))
    return sites


def _never_loaded(module: Any, seed: int) -> Any:
    import torch

    fresh = copy.deepcopy(module)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in fresh.parameters(recurse=False):
            p.copy_((torch.randn(p.shape, generator=gen) * INIT_STD).to(p.dtype))
    # vLLM on CPU packs GEMM weights once after loading (`cpu_linear`, a closure over the packed
    # tensor, deep-copied with the module): without repacking, the head would still compute with
    # the weights it was copied from while its `weight` says otherwise.
    method = getattr(fresh, "quant_method", None)
    if method is not None and callable(getattr(method, "process_weights_after_loading", None)):
        method.process_weights_after_loading(fresh)
    return fresh


def rewire(draft: Any, target: Any, spec: dict[str, str], seed: int = 0) -> list[str]:
    """Perform ``spec`` (role -> ``target`` | ``random``) on the live draft; returns one line per
    module replaced. The target is never modified."""
    lines = []
    for n, (role, kind) in enumerate(sorted(spec.items())):
        if kind not in KINDS:
            raise SurgeryError(diag("SRG460", f"ablation rewire {role}: {kind!r} is not one of {', '.join(KINDS)}"))
        for d_path, t_path in role_sites(draft, target, role):
            target_module = get_path(target, t_path)
            new = target_module if kind == "target" else _never_loaded(get_path(draft, d_path), seed + n)
            parent, name = split_parent(draft, d_path)
            setattr(parent, name, new)  # nn.Module registers it (a ModuleDict / ModuleList key too)
            lines.append(f"{role}: draft {d_path} <- {'target ' + t_path if kind == 'target' else 'never loaded (seeded random)'}")
    return lines


def rewire_hook(spec: dict[str, str], seed: int = 0, sink: list | None = None):
    """A load_model "after" callback performing ``spec``; what it did is appended to ``sink``."""

    def hook(proposer, target_model):
        target_lm = target_model.get_language_model() if hasattr(target_model, "get_language_model") else target_model
        done = rewire(proposer.model, target_lm, spec, seed)
        if sink is not None:
            sink.extend(done)

    return hook
