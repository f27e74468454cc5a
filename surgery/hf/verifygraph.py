"""The target's verify forward over a static KV cache that a rejection rewinds, captured once per k as a
CUDA graph (issue 69).

Why: with the draft round one CUDA graph (surgery/hf/draftgraph.py), what was left of a round on the GPU
was the target's verify forward: transformers' eager Gemma 4 forward on a ``DynamicCache``, about 950
kernel launches, 16-18 ms of host time against ~3 ms of device time (docs/gpu.md section 15). A graph
needs fixed addresses and shapes, which a ``DynamicCache`` (a new, longer tensor per forward, cropped on
rejection) cannot give. So the verify step runs on :class:`RewindCache`:

* one ``[1, kv_heads, L, dim]`` K and V buffer per non-KV-shared target layer, full length for sliding
  layers too (a ring buffer of the window could not be rewound: a rejected token would already have
  overwritten a position the next round needs), ``L`` the call's length plus k + 1, rounded up to a
  bucket so calls of similar length share the graphs;
* one device scalar, ``start``: where the forward's first token goes. Every layer writes its k + 1 new
  K/V at ``start .. start + k`` (``index_copy_``) and the masks are built from it inside the graph:
  query i attends key j iff ``j <= start + i`` and, on a sliding layer, ``j > start + i - window``;
* a rejection rewinds by setting ``start`` to the accepted prefix's end on the next round: the rejected
  positions' K/V stay in the buffers, masked (no query ever attends past itself) and overwritten by the
  next round's writes. Nothing is copied back, nothing is cropped.

The forward itself is the model's own ``forward`` (transformers' code: embedding, per-layer inputs,
decoder layers, the KV-shared tail reading ``shared_kv_states``, norm, head, soft-capping), given the
cache, explicit ``position_ids`` and the mask per layer type (Gemma 4 takes a prepared mask mapping). On
CUDA the k + 1-token step is captured once per (k, L) and replayed; the prompt's prefill runs the same
code eagerly. On the CPU the same cache and masks run eagerly ("static").

Checked once per (target, k, L) before use, on a probe longer than the sliding window where the bucket
allows it: the static forward against the eager ``DynamicCache`` forward with transformers' own masks
(prefill and verify, logits and last hidden state; sliding-window layers and the KV-shared tail
included), then the graph's replay against the same step run eagerly. Any difference, or an exception
anywhere (another transformers, another torch), and the loop falls back to the ``DynamicCache`` path for
that (target, k, L) and says why in ``RoundStats.verify_path``: slower, never wrong. Output identity with
greedy is what the tests and benchmarks then check end to end.
"""
from __future__ import annotations

import weakref

import torch

from . import compat

BUCKET = 128
_RUNNERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # target -> {key: (runner | None, path)}
_MAX_RUNNERS = 4  # per target; each holds its cache buffers and (CUDA) its graph's memory pool
MODES = ("auto", "graph", "static", "dynamic")
DYNAMIC = "dynamic cache, eager (transformers' DynamicCache, cropped on rejection)"
# what "auto" runs on the CPU: the DynamicCache path. On the 2-core machine the static cache's eager verify
# forward measured no faster, within noise (bench/results/hf_verify_modes_cpu.json; the CPU is not launch-bound,
# and attending all L positions costs about what the DynamicCache's concatenation saves)
CPU_AUTO = "dynamic"


def bucket(length: int) -> int:
    return -(-int(length) // BUCKET) * BUCKET


# -- the cache -------------------------------------------------------------------------------------

def _rewind_layer_class():
    """A transformers ``StaticLayer`` that writes at a shared device position and never counts: the
    caller owns the position (``RewindCache.start``), so a rewind is setting it, not undoing writes."""
    from transformers.cache_utils import StaticLayer

    class RewindLayer(StaticLayer):
        def __init__(self, length: int, start: torch.Tensor, steps: dict):
            super().__init__(max_cache_len=length)
            self.length, self.start, self.steps = length, start, steps

        def lazy_initialization(self, key_states, value_states, *args, **kwargs):
            self.dtype, self.device = key_states.dtype, key_states.device
            shape = (key_states.shape[0], key_states.shape[1], self.length)
            self.keys = torch.zeros(*shape, key_states.shape[-1], dtype=key_states.dtype, device=key_states.device)
            self.values = torch.zeros(*shape, value_states.shape[-1], dtype=value_states.dtype,
                                      device=value_states.device)
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n = key_states.shape[-2]
            where = self.steps.get(n)
            if where is None or where.device != key_states.device:  # the prefill's length: built once per n
                where = torch.arange(n, device=key_states.device)
            where = where + self.start
            self.keys.index_copy_(2, where, key_states)
            self.values.index_copy_(2, where, value_states)
            return self.keys, self.values

        def get_seq_length(self, *args, **kwargs) -> int:  # noqa: D102 - the loop passes position_ids itself
            return 0

    return RewindLayer


def _cache_class():
    from transformers import Cache

    class RewindCache(Cache):
        """Full-length static K/V per layer, written at ``start`` (a device scalar the loop sets)."""

        def __init__(self, num_layers: int, length: int, device, steps: dict):
            self.start = torch.zeros((), dtype=torch.long, device=device)
            layer = _rewind_layer_class()
            super().__init__(layers=[layer(length, self.start, steps) for _ in range(num_layers)])
            self.length = length

        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            return self.layers[layer_idx].update(key_states, value_states)

    return RewindCache


# -- the forward -----------------------------------------------------------------------------------

class StaticVerify:
    """Prefill and verify steps of one target over a :class:`RewindCache` of length ``length``;
    ``capture(k)`` records the k + 1-token step as a CUDA graph."""

    def __init__(self, model, length: int, device, windows: dict):
        self.model, self.length, self.device, self.windows = model, length, torch.device(device), windows
        cfg = compat.text_config(model.config)
        self.steps: dict = {}
        self.cache = _cache_class()(cfg.num_hidden_layers, length, self.device, self.steps)
        self.kv_idx = torch.arange(length, device=self.device).view(1, length)
        self.cache_kw = compat.cache_kwarg(model)
        self.graphs: dict = {}  # k -> (graph, ids buffer, outputs)
        self.pool = None

    @property
    def start(self) -> torch.Tensor:
        return self.cache.start

    def masks(self, n: int) -> dict:
        """Per layer type, [1, 1, n, L] booleans: query i (at start + i) attends j <= start + i, and
        on a sliding layer only the last ``window`` of those."""
        q = (self._arange(n) + self.start).view(n, 1)
        causal = self.kv_idx <= q
        out = {}
        for kind, window in self.windows.items():
            mask = causal if window is None else causal & (self.kv_idx > q - window)
            out[kind] = mask.view(1, 1, n, self.length)
        return out

    def _arange(self, n: int) -> torch.Tensor:
        got = self.steps.get(n)
        if got is None:
            got = self.steps[n] = torch.arange(n, device=self.device)
        return got

    def forward(self, ids: torch.Tensor, keep_last: bool = False):
        """The model's own forward over ``ids`` at positions start .. start + n - 1 (eager)."""
        n = ids.shape[1]
        position = (self._arange(n) + self.start).view(1, n)
        kwargs = {self.cache_kw: self.cache}
        if keep_last:
            kwargs["logits_to_keep"] = 1
        out = self.model(input_ids=ids, position_ids=position, attention_mask=self.masks(n), use_cache=True,
                         output_hidden_states=True, return_shared_kv_states=True, **kwargs)
        return out.logits, out.hidden_states[-1], out.shared_kv_states

    def prefill(self, ids: torch.Tensor):
        """(last logits [1, V], last hidden [1, 1, H], published K/V) of the prompt at positions 0.."""
        self.start.zero_()
        logits, hidden, published = self.forward(ids, keep_last=True)
        return logits[:, -1], hidden[:, -1:], published

    def verify(self, tokens: torch.Tensor, committed: int, k: int):
        """(logits [n, V], hidden [1, n, H], published) of ``tokens`` [1, n] at committed..: the graph's
        replay when one is captured for n = k + 1, else the same step eagerly."""
        self.start.fill_(committed)  # the rewind: positions from here on are (re)written, later ones masked
        entry = self.graphs.get(k) if tokens.shape[1] == k + 1 else None
        if entry is None:
            logits, hidden, published = self.forward(tokens)
            return logits[0], hidden, published
        graph, ids, out = entry
        ids.copy_(tokens)
        graph.replay()
        return out[0][0], out[1], out[2]  # valid until the next replay: the loop reads them before it

    def rewind(self, rejected: int) -> None:
        """Nothing to undo: the next round's ``start`` masks the rejected positions and overwrites them."""

    def export(self, valid: int):
        """The K/V of the first ``valid`` positions as a DynamicCache of copies (what ``generate`` returns
        as past_key_values): the static buffers are the runner's, reused by the next call."""
        from transformers import DynamicCache

        out = DynamicCache()
        for i, layer in enumerate(self.cache.layers):
            if layer.is_initialized:
                out.update(layer.keys[:, :, :valid].clone(), layer.values[:, :, :valid].clone(), i)
        return out

    def capture(self, k: int, committed: int) -> None:
        """One CUDA graph of the k + 1-token step (warmed on a side stream first, as torch.cuda.graphs
        asks), its input and outputs static tensors."""
        ids = torch.zeros(1, k + 1, dtype=torch.long, device=self.device)
        self.start.fill_(committed)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self.forward(ids)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self.forward(ids)
        self.pool = graph.pool()
        self.graphs[k] = (graph, ids, out)


# -- set-up, checks and the fallback ---------------------------------------------------------------

def supported(model) -> str | None:
    """None if the static verify applies to this target, else why not (said in verify_path)."""
    cfg = compat.text_config(model.config)
    impl = getattr(cfg, "_attn_implementation", None) or getattr(model.config, "_attn_implementation", None)
    if impl != "sdpa":
        return f"attention implementation {impl!r} (the static masks are sdpa's booleans)"
    kinds = set(getattr(cfg, "layer_types", None) or ())
    if not kinds or not kinds <= {"full_attention", "sliding_attention"}:
        return f"layer types {sorted(kinds)} (full_attention / sliding_attention only)"
    if getattr(cfg, "use_bidirectional_attention", None) not in (None, False, "vision"):
        return f"use_bidirectional_attention={cfg.use_bidirectional_attention!r}"
    return None


def _windows(model) -> dict:
    cfg = compat.text_config(model.config)
    window = getattr(cfg, "sliding_window", None)
    return {kind: (int(window) if kind == "sliding_attention" and window else None) for kind in set(cfg.layer_types)}


def _probe(model, length: int, k: int, device) -> torch.Tensor:
    """Deterministic token ids long enough that the verify step's positions pass the sliding window
    (where the bucket holds that many), so the window's masks are part of the check."""
    cfg = compat.text_config(model.config)
    window = int(getattr(cfg, "sliding_window", 0) or 0)
    n = max(1, min(length - (k + 1), window + 2 * (k + 1) + 8 if window else 16))
    g = torch.Generator().manual_seed(69)
    return torch.randint(1, cfg.vocab_size, (1, n), generator=g).to(device)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def _tolerance(dtype) -> float:
    return 1e-4 if dtype == torch.float32 else 3e-2


def _check_against_dynamic(model, runner: StaticVerify, k: int, dtype) -> str | None:
    """None if the static prefill + verify reproduce the eager DynamicCache forward (transformers' own
    masks) on the probe, else what differed."""
    from transformers import DynamicCache

    probe = _probe(model, runner.length, k, runner.device)
    ids, step = probe[:, : -(k + 1)], probe[:, -(k + 1):]
    cache = DynamicCache()
    kw = {runner.cache_kw: cache}
    ref_pre = model(input_ids=ids, use_cache=True, output_hidden_states=True, return_shared_kv_states=True,
                    logits_to_keep=1, **kw)
    ref = model(input_ids=step, use_cache=True, output_hidden_states=True, return_shared_kv_states=True, **kw)
    logits, hidden, _ = runner.prefill(ids)
    got = runner.verify(step, ids.shape[1], k)
    tol = _tolerance(dtype)
    for what, a, b in (("prefill logits", logits, ref_pre.logits[:, -1]),
                       ("prefill hidden state", hidden, ref_pre.hidden_states[-1][:, -1:]),
                       ("verify logits", got[0], ref.logits[0]), ("verify hidden state", got[1], ref.hidden_states[-1])):
        err = _rel(a, b)
        if not err <= tol:
            return f"{what} differ from the DynamicCache forward's by {err:.3g} (relative; tolerance {tol:g})"
    if dtype == torch.float32 and not torch.equal(got[0].argmax(-1), ref.logits[0].argmax(-1)):
        # (float32 only: bf16 logits are coarse enough near 30 for an exact tie to fall either way)
        return "the verify step's greedy tokens differ from the DynamicCache forward's"
    return None


@torch.no_grad()
def runner_for(model, k: int, max_length: int, device, dtype, mode: str) -> tuple["StaticVerify | None", str]:
    """(runner, verify_path) for this target, k and length bucket: built, checked and (graph) captured on
    first use, reused after; runner None means the DynamicCache path, and verify_path says why."""
    if mode == "dynamic":
        return None, DYNAMIC
    reason = compat.release_gap() or supported(model)
    if reason is not None:
        return None, f"{DYNAMIC}: {reason}"
    device = torch.device(device)
    graph = mode == "graph"
    if graph and device.type != "cuda":
        return None, f"{DYNAMIC}: a CUDA graph needs a CUDA device, the target is on {device.type}"
    length = bucket(max_length + k + 1)
    key = (k, length, dtype, str(device), graph)
    cache = _RUNNERS.setdefault(model, {})
    if key in cache:
        return cache[key]
    try:
        runner = _shared_runner(cache, model, length, device, dtype, graph)
        why = _check_against_dynamic(model, runner, k, dtype)
        if why is not None:
            raise ValueError(why)
        if graph:
            probe = _probe(model, length, k, device)
            ids, step = probe[:, : -(k + 1)], probe[:, -(k + 1):]
            runner.prefill(ids)
            eager = [t.clone() for t in runner.verify(step, ids.shape[1], k)[:2]]
            runner.capture(k, ids.shape[1])
            runner.prefill(ids)
            replayed = runner.verify(step, ids.shape[1], k)
            for what, a, b in (("logits", replayed[0], eager[0]), ("hidden state", replayed[1], eager[1])):
                err = _rel(a, b)
                if not err <= _tolerance(dtype) / 10:
                    raise ValueError(f"CUDA graph's {what} differ from the eager step's by {err:.3g}")
        path = ("cuda graph" if graph else "static cache, eager") + \
            " (surgery/hf/verifygraph.py, checked against the DynamicCache forward)"
        entry = (runner, path)
    except Exception as exc:  # noqa: BLE001 - another transformers / torch: the DynamicCache path still works
        entry = (None, f"{DYNAMIC}: static verify refused: {type(exc).__name__}: {str(exc)[:200]}")
    if len(cache) >= _MAX_RUNNERS:
        cache.pop(next(iter(cache)))
    cache[key] = entry
    return entry


def _shared_runner(cache: dict, model, length: int, device, dtype, graph: bool) -> StaticVerify:
    """One StaticVerify (one cache) per (length, dtype, device, graph or not): the graphs of several k
    share it (an eager runner never replays a graph)."""
    for (_k, n, dt, dev, g), (runner, _path) in cache.items():
        if runner is not None and (n, dt, dev, g) == (length, dtype, str(device), graph):
            return runner
    return StaticVerify(model, length, device, _windows(model))


class DynamicVerify:
    """The verify path of issues 16-56: transformers' ``DynamicCache`` (config-less: full-length K/V per
    layer, croppable anywhere), eager, a rejection cropped (a view, no copy). The fallback of every
    static path, and what ``verify_mode="dynamic"`` asks for."""

    def __init__(self, model):
        from transformers import DynamicCache

        self.model, self.cache, self.cache_kw = model, DynamicCache(), compat.cache_kwarg(model)

    def _forward(self, ids, **extra):
        return self.model(input_ids=ids, use_cache=True, output_hidden_states=True, return_shared_kv_states=True,
                          **{self.cache_kw: self.cache}, **extra)

    def prefill(self, ids):
        out = self._forward(ids, logits_to_keep=1)
        return out.logits[:, -1], out.hidden_states[-1][:, -1:], out.shared_kv_states

    def verify(self, tokens, committed: int, k: int):
        out = self._forward(tokens)
        return out.logits[0], out.hidden_states[-1], out.shared_kv_states

    def rewind(self, rejected: int) -> None:
        if rejected > 0:  # never crop(0): old releases read it as a length
            self.cache.crop(-rejected)

    def export(self, valid: int):
        return self.cache


def verifier_for(model, k: int, max_length: int, device, mode: str | None):
    """(verifier, verify_path) of a call: the static runner ``mode`` asks for ("auto": the graph on
    CUDA, the DynamicCache path on the CPU), or the DynamicCache path with the reason."""
    mode = mode or "auto"
    if mode == "auto":
        mode = "graph" if torch.device(device).type == "cuda" else CPU_AUTO
    dtype = next(model.parameters()).dtype
    runner, path = runner_for(model, k, max_length, device, dtype, mode)
    return (runner if runner is not None else DynamicVerify(model)), path
