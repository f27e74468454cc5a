"""A round of k MTP draft steps over static K/V buffers, captured once as one CUDA graph (issue 56).

Why: on the GPU a small pair is bound by kernel launches and Python, not arithmetic. A round of k
hoisted draft steps (surgery/hf/fastdraft.py) still launches every kernel of every draft layer from
Python, k times; at the distilled tiny pair that was about as long as the target's verify forward.
A CUDA graph replays all k steps with one launch, but it needs fixed addresses and shapes, while the
target's ``DynamicCache`` grows (a new tensor per forward) and the draft reads ``K/V[:committed]``.
So the draft reads its own fixed buffers instead:

* one ``[1, heads, L, dim]`` K and V buffer per published layer type (``L``: the call's maximum
  length, rounded up to a bucket so calls of similar length share the graph);
* after each target forward, only the newly committed positions are copied in (the accepted
  drafts and the bonus token; rejected positions are never copied, so nothing is undone on
  rejection);
* the masks are built inside the graph from the device-side position: ``j < committed`` and, for a
  sliding layer, the last ``window`` positions, where ``window`` is read off the assistant's own
  ``create_attention_masks`` at set-up (so a transformers release that counts the window
  differently is followed, not assumed).

Output identity with greedy never depends on this module (the target verifies every draft); the
draft's tokens only decide acceptance. Still, the path is checked once per runner against the
assistant's own ``forward`` (same token, same hidden state to rounding) and the graph against the
same steps run eagerly; on any difference the loop falls back and says why in its statistics.
On the CPU the same buffers and masks run eagerly (no graph), which is what the CPU tests exercise.
"""
from __future__ import annotations

import weakref

import torch

from . import fastdraft

BUCKET = 128  # L rounds up to a multiple of this: the warm-up's graph serves every call up to L
_RUNNERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # draft -> {key: StaticDraft}
_MAX_RUNNERS = 4  # per draft; each holds buffers and (CUDA) a graph's memory pool


def bucket(length: int) -> int:
    return -(-int(length) // BUCKET) * BUCKET


def _window(draft, kind: str, published: dict, like: torch.Tensor) -> float | str:
    """How many of the last positions a draft layer of ``kind`` attends (inf = all), read off the
    assistant's own masks on a probe longer than any window; a str says why it cannot be used."""
    sw = getattr(draft.model.config, "sliding_window", None) or 0
    n = 2 * int(sw) + 8 if sw else 16
    kv = {key: (torch.zeros(1, k.shape[1], n, k.shape[-1], dtype=k.dtype, device=k.device),) * 2
          for key, (k, _v) in published.items()}
    mask = draft.create_attention_masks(draft.pre_projection(like), None, kv).get(kind)
    if mask is None:
        return float("inf")
    if mask.dtype != torch.bool:
        return f"{kind} mask is {mask.dtype}, not a boolean (sdpa) mask"
    row = mask.reshape(-1)[-n:].tolist()
    first = row.index(True) if True in row else n
    if not all(row[first:]) or any(row[:first]):
        return f"{kind} mask is not a suffix of the K/V"
    return float("inf") if first == 0 else n - first


def can_capture(device: torch.device) -> bool:
    return device.type == "cuda"


def supported(draft) -> str | None:
    reason = fastdraft.supported(draft)
    if reason is None and getattr(draft.config, "_attn_implementation", None) != "sdpa":
        reason = f"attention implementation {getattr(draft.config, '_attn_implementation', None)!r} (sdpa only)"
    return reason


class StaticDraft:
    """The k draft steps of a round over fixed buffers; ``graph=True`` captures them on CUDA."""

    def __init__(self, draft, embed, published: dict, k: int, length: int, like: torch.Tensor):
        self.draft, self.embed, self.k, self.length = draft, embed, k, length
        device = like.device
        self.windows = {}
        for kind in set(draft.model.config.layer_types):
            w = _window(draft, kind, published, like)
            if isinstance(w, str):
                raise ValueError(w)
            self.windows[kind] = w
        self.kv = {key: (torch.zeros(1, kk.shape[1], length, kk.shape[-1], dtype=kk.dtype, device=device),
                         torch.zeros(1, vv.shape[1], length, vv.shape[-1], dtype=vv.dtype, device=device))
                   for key, (kk, vv) in published.items()}
        self.idx = torch.arange(length, device=device).view(1, 1, 1, length)
        self.bonus = torch.zeros(1, 1, dtype=torch.long, device=device)
        self.hidden = torch.zeros(1, 1, like.shape[-1] - embed.embedding_dim, dtype=like.dtype, device=device)
        self.position = torch.ones(1, 1, dtype=torch.long, device=device)
        self.out = None
        self.graph = None
        self.synced = 0

    # -- per round ------------------------------------------------------------------------------
    def sync(self, published: dict, committed: int) -> None:
        """Bring the buffers to the target's ``committed`` positions: copy only the ones not yet
        copied (a call starts at 0: ``reset``). Rejected drafts' positions are never copied."""
        self.copy_kv(published, self.synced, committed)
        self.synced = committed

    def reset(self) -> None:
        self.synced = 0

    def copy_kv(self, published: dict, lo: int, hi: int) -> None:
        """Positions [lo, hi) of the target's K/V into the buffers."""
        if hi <= lo:
            return
        dst, src = [], []
        for key, (kb, vb) in self.kv.items():
            k, v = published[key]
            dst += [kb[:, :, lo:hi], vb[:, :, lo:hi]]
            src += [k[:, :, lo:hi], v[:, :, lo:hi]]
        torch._foreach_copy_(dst, src)  # one launch for every buffer (a loop of copy_ where unfused)

    def masks(self) -> dict:
        """Per layer type: attend j < committed (= the draft position), sliding: the last window."""
        pos = self.position.view(1, 1, 1, 1)
        valid = self.idx < pos
        return {kind: valid if w == float("inf") else valid & (self.idx >= pos - int(w))
                for kind, w in self.windows.items()}

    def first_inputs(self) -> torch.Tensor:
        return torch.cat([self.embed(self.bonus), self.hidden], dim=-1)

    def body(self) -> torch.Tensor:
        """k steps from (bonus, hidden) at ``position``; tokens [1, k]. No host sync."""
        draft, pos, masks = self.draft, self.position, self.masks()
        inputs = self.first_inputs()
        rope = fastdraft.rotary(draft, pos, inputs)
        toks = []
        for i in range(self.k):
            tok, h = fastdraft.step(draft, inputs, self.kv, pos, masks, rope)
            toks.append(tok)
            if i + 1 < self.k:
                inputs = torch.cat([self.embed(tok), h], dim=-1)
        return torch.cat(toks, dim=1)

    def run(self, bonus: torch.Tensor, hidden: torch.Tensor, committed: int) -> torch.Tensor:
        self.bonus.copy_(bonus.view(1, 1))
        self.hidden.copy_(hidden.reshape(self.hidden.shape))
        self.position.fill_(committed)
        if self.graph is None:
            return self.body()
        self.graph.replay()
        return self.out.clone()  # the next replay overwrites self.out

    # -- set-up ---------------------------------------------------------------------------------
    def capture(self) -> None:
        """One CUDA graph of ``body`` (warmed on a side stream first, as torch.cuda.graphs asks)."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self.body()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.out = self.body()
        self.graph = graph


def runner_for(draft, embed, published: dict, k: int, max_length: int, first: torch.Tensor,
               bonus: torch.Tensor, hidden: torch.Tensor, committed: int,
               graph: bool | None = None) -> tuple["StaticDraft | None", str]:
    """(runner, path) for this draft, k and length bucket: built, checked and (CUDA) captured on
    first use, reused after. ``runner`` None means: use the hoisted per-step path; ``path`` says why.
    ``first``: the round's first draft input, checked against the assistant's own forward."""
    reason = supported(draft)
    if reason is not None:
        return None, f"hoisted per step: {reason}"
    device = first.device
    graph = (device.type == "cuda") if graph is None else graph
    if graph and not can_capture(device):
        return None, f"hoisted per step: a CUDA graph needs a CUDA device, the draft is on {device.type}"
    length = bucket(max_length + 1)
    key = (k, length, first.dtype, str(device), graph,
           tuple((n, tuple(v[0].shape[:2]), v[0].shape[-1], v[0].dtype) for n, v in sorted(published.items())))
    cache = _RUNNERS.setdefault(draft, {})
    if key in cache:
        return cache[key]
    try:
        runner = StaticDraft(draft, embed, published, k, length, first)
        runner.sync(published, committed)
        kv = {n: (a[:, :, :committed], b[:, :, :committed]) for n, (a, b) in published.items()}
        position = torch.full((1, 1), committed, dtype=torch.long, device=device)
        eager = runner.run(bonus, hidden, committed)
        ref_tok, ref_h = fastdraft.reference_step(draft, first, kv, position)
        tok, h = _first_step(runner)
        why = _differs(tok, h, ref_tok, ref_h)
        if why is not None:
            raise ValueError(f"static buffers vs draft(...): {why}")
        if graph:
            runner.capture()
            replayed = runner.run(bonus, hidden, committed)
            if not torch.equal(replayed, eager):
                raise ValueError(f"CUDA graph drafted {replayed.tolist()}, eager {eager.tolist()}")
        path = ("cuda graph" if graph else "static buffers, eager") + " (surgery/hf/draftgraph.py, checked against draft(...))"
        entry = (runner, path)
    except Exception as exc:  # noqa: BLE001 - another transformers / torch: the per-step path still works
        entry = (None, f"hoisted per step: static draft refused: {type(exc).__name__}: {str(exc)[:200]}")
    if len(cache) >= _MAX_RUNNERS:
        cache.pop(next(iter(cache)))
    cache[key] = entry
    return entry


def _first_step(runner: StaticDraft):
    """The first step of ``runner.body`` alone (token and hidden), for the check."""
    inputs = runner.first_inputs()
    return fastdraft.step(runner.draft, inputs, runner.kv, runner.position, runner.masks(),
                          fastdraft.rotary(runner.draft, runner.position, inputs))


def _differs(tok, h, ref_tok, ref_h) -> str | None:
    if not torch.equal(tok.view(-1), ref_tok.view(-1)):
        return f"token {tok.flatten().tolist()} != {ref_tok.flatten().tolist()}"
    tol = 1e-5 if h.dtype == torch.float32 else 2e-2
    if not torch.allclose(h.float(), ref_h.float(), rtol=tol, atol=tol):
        return f"hidden state differs by {(h.float() - ref_h.float()).abs().max().item():.3g}"
    return None
