"""What the HF GPU runs share (bench/gpu/hf_generate_gpu.py, hf_round_profile_gpu.py): the wired tiny pair,
the run's versions, and the per-part clock of our loop. Neither script imports the other (issue 69).

* :func:`wired_tiny`: the distilled tiny Gemma 4 pair wired by ``surgery.apply`` (gemma4-mtp), verified;
* :func:`versions`: python / torch / transformers / the card, for every result file;
* :class:`Clock` and :func:`instrumented`: host time and device time (CUDA events) of each part of a
  round of ``surgery.hf.speculative_decoding``: the draft round (``_Drafter.round``), the prefill and
  the verify step (the verifier's ``prefill`` / ``verify``: a CUDA graph's replay is timed there, where
  the model's ``forward`` is never called), the rewind after a rejection, and every host-device
  synchronisation by kind.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

from common import ROOT, tiny_pair_dirs

SYNC_METHODS = ("item", "tolist", "cpu", "__int__", "__bool__", "__float__", "__index__")
PARTS = ("draft_round", "prefill", "verify_forward", "rewind", "host_sync_wait")


def sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def versions(device) -> dict:
    import platform

    import torch
    import transformers

    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "device": device,
            "device_name": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
            "torch_threads": torch.get_num_threads()}


def plan_for(t_dir, d_dir, pairs=None, tmp=None):
    """The gemma4-mtp plan for this pair; ``pairs``: an explicit draft -> target layer map instead."""
    from surgery import Runtime, load_recipe, read_facts, resolve

    path = ROOT / "recipes" / "gemma4-mtp.yaml"
    if pairs is not None:
        text = path.read_text().replace("    rule: last_unshared_of_type\n", "    rule: explicit\n    pairs: {"
                                        + ", ".join(f"{d}: {t}" for d, t in pairs.items()) + "}\n")
        path = tmp / f"explicit-{'-'.join(map(str, pairs.values()))}.yaml"
        path.write_text(text)
    plan = resolve(load_recipe(str(path)), read_facts(d_dir), read_facts(t_dir), Runtime(engine="hf"))
    assert plan.ok, plan.errors
    return plan


def wired_tiny(device, dtype, pairs=None):
    """(target, draft): the tiny pair loaded, applied and verified."""
    import surgery
    from surgery.hf.loader import load_pair

    t_dir, d_dir = tiny_pair_dirs(Path("/tmp/tiny_hf_generate"), strip_per_layer_config=False)
    target, draft = load_pair(t_dir, d_dir, device=device, dtype=dtype)
    plan = plan_for(t_dir, d_dir, pairs, Path("/tmp/tiny_hf_generate"))
    report = surgery.apply(plan, draft, target)
    verification = surgery.verify(plan, draft, target, report=report)
    assert verification.ok, verification.failed
    return target, draft


class Clock:
    """Host time and device time (CUDA events) of named parts; elapsed read once at the end."""

    def __init__(self, cuda: bool):
        import torch

        self.cuda, self.torch = cuda, torch
        self.host: dict[str, float] = {}
        self.events: dict[str, list] = {}
        self.calls: dict[str, int] = {}

    @contextmanager
    def part(self, name):
        torch = self.torch
        ev = None
        if self.cuda:
            ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            ev[0].record()
        t = time.perf_counter()
        try:
            yield
        finally:
            self.host[name] = self.host.get(name, 0.0) + time.perf_counter() - t
            self.calls[name] = self.calls.get(name, 0) + 1
            if ev is not None:
                ev[1].record()
                self.events.setdefault(name, []).append(ev)

    def device(self) -> dict[str, float]:
        if not self.cuda:
            return dict(self.host)
        self.torch.cuda.synchronize()
        return {n: sum(a.elapsed_time(b) for a, b in evs) / 1000 for n, evs in self.events.items()}


@contextmanager
def instrumented(clock: Clock, syncs: dict):
    """Patch the loop's parts to report to ``clock``; count host syncs by kind into ``syncs`` (on a
    GPU run only reads of device tensors; on the CPU every read, the dry run's stand-in)."""
    import torch

    import surgery.hf.generate as gen
    from surgery.hf import verifygraph

    saved = []

    def patch(owner, name, part):
        real = getattr(owner, name)
        saved.append((owner, name, owner.__dict__.get(name, None), name in owner.__dict__))

        def timed(*a, __real=real, **kw):
            with clock.part(part):
                return __real(*a, **kw)

        setattr(owner, name, timed)

    patch(gen._Drafter, "round", "draft_round")
    for cls in (verifygraph.StaticVerify, verifygraph.DynamicVerify):
        patch(cls, "prefill", "prefill")
        patch(cls, "verify", "verify_forward")
        patch(cls, "rewind", "rewind")
    for meth in SYNC_METHODS:
        real = getattr(torch.Tensor, meth)

        def counted(self, *a, __real=real, __name=meth, **kw):
            if self.device.type == "cpu" and clock.cuda:  # a host tensor read on a GPU run: no sync
                return __real(self, *a, **kw)
            syncs[__name] = syncs.get(__name, 0) + 1
            with clock.part("host_sync_wait"):
                return __real(self, *a, **kw)

        saved.append((torch.Tensor, meth, torch.Tensor.__dict__.get(meth, None), meth in torch.Tensor.__dict__))
        setattr(torch.Tensor, meth, counted)
    try:
        yield
    finally:
        for owner, name, old, had in reversed(saved):
            if had:
                setattr(owner, name, old)
            else:
                delattr(owner, name)
