"""SGLang's offline Engine run for surgery: one engine per child process, the recipe applied in
SGLang's scheduler by surgery's `sglang.srt.plugins` entry point, the hook's report read back.

Why a child process per engine: SGLang's Engine spawns its scheduler (multiprocessing, spawn) and
one engine's failure (a scheduler that dies at start) must not take the next one with it; each run
also gets its own environment (`SURGERY_RECIPE`, `SURGERY_REPORT`), which is how the recipe reaches
the scheduler: SGLang calls `load_plugins()` at the top of the scheduler process
(managers/scheduler.py run_scheduler_process), and surgery's plugin reads `SURGERY_RECIPE` there.

The entry point needs an installed distribution. A checkout on PYTHONPATH has none, so
`entry_point_dir` writes a minimal one (a `*.dist-info` folder with `entry_points.txt` naming
`surgery.sglang.plugin:register`) into a folder that goes on the child's PYTHONPATH;
`importlib.metadata` finds it there in every process SGLang spawns (they inherit PYTHONPATH). When
spec-surgery is installed (pip install / --target) its own entry point is used instead.

Acceptance comes from SGLang's own counters, per request `meta_info` (0.5.16 / 0.5.17 / 0.5.21
managers/tokenizer_manager.py `_calculate_spec_decoding_metrics`): `spec_verify_ct` (verify forwards),
`spec_num_correct_drafts` (accepted draft tokens, no bonus), `spec_num_proposed_drafts`
(= verify_ct * (num_draft_tokens - 1)), `spec_accept_length` (= completion_tokens / verify_ct) and
`completion_tokens`; the spec keys are absent when no verify ran.

SGLang is imported only in the child (`python -m surgery.sglang.engine`), never here."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from importlib.metadata import entry_points
from pathlib import Path

from ..engine.cards import card
from .. import greedyties
from ..greedyties import divergences, exact_tie  # noqa: F401 - this module's names for them too

RESULT_TAG = "SURGERY_SGLANG_RESULT "
PLUGIN_GROUP = "sglang.srt.plugins"
PLUGIN_VALUE = "surgery.sglang.plugin:register"
DIST = "spec_surgery_sglang_plugin"
NUM_STEPS, TOPK, NUM_DRAFT_TOKENS = 3, 1, 4
MAX_TOKENS = 48


def plugin_registered() -> bool:
    """Whether an installed distribution already registers surgery's SGLang plugin."""

    return any(ep.value == PLUGIN_VALUE for ep in entry_points(group=PLUGIN_GROUP))


def entry_point_dir(dest) -> Path:
    """A folder holding a minimal distribution that registers the plugin (module doc); put it on
    PYTHONPATH beside the checkout."""
    dest = Path(dest)
    info = dest / f"{DIST}-0.0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.0.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[{PLUGIN_GROUP}]\nspec_surgery = {PLUGIN_VALUE}\n", encoding="utf-8")
    return dest


def engine_kwargs(target, draft=None, algorithm=None, *, steps=NUM_STEPS, topk=TOPK, draft_tokens=NUM_DRAFT_TOKENS,
                  dtype="bfloat16", cuda_graph=False, mem_fraction=0.15, seed=0) -> dict:
    """One engine's settings: triton attention (it has every EAGLE mode), pytorch sampling, token ids
    in and out (no tokenizer), a small KV budget. `draft`: the speculative engine."""
    kw = dict(model_path=str(target), attention_backend="triton", sampling_backend="pytorch", skip_tokenizer_init=True,
              disable_cuda_graph=not cuda_graph, mem_fraction_static=mem_fraction, dtype=dtype, random_seed=seed,
              max_running_requests=8, log_level="info", tp_size=1)
    if draft is not None:
        kw.update(speculative_algorithm=algorithm, speculative_draft_model_path=str(draft), speculative_num_steps=steps,
                  speculative_eagle_topk=topk, speculative_num_draft_tokens=draft_tokens)
    return kw


def served_draft(draft, algorithm: str | None, dest) -> tuple[Path, dict | None]:
    """The draft folder SGLang is given. An EAGLE-1 head written with a plain architecture SGLang
    would load as a plain model (card `wiring.eagle_draft_architectures`) is served as a copy with
    SGLang's EAGLE class (weights linked, config edited); (folder, what was changed or None)."""
    draft = Path(draft)
    cfg = json.loads((draft / "config.json").read_text())
    renames = card("sglang").wiring.eagle_draft_architectures
    arch = (cfg.get("architectures") or [None])[0]
    if algorithm not in ("EAGLE", "NEXTN") or arch not in renames or not _has_tensor(draft, "fc.weight"):
        return draft, None
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for f in draft.iterdir():
        if f.name != "config.json" and not (dest / f.name).exists():
            (dest / f.name).symlink_to(f.resolve())
    cfg["architectures"] = [renames[arch]]
    (dest / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return dest, {"architectures": [arch, renames[arch]],
                  "because": "SGLang loads an EAGLE-1 head by its config's architecture and does not rename "
                             f"{arch} (it would build a plain {arch} and drop the head's fc)"}


def _has_tensor(folder: Path, name: str) -> bool:
    from safetensors import safe_open

    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            if name in st.keys():
                return True
    return False


def cuda_available() -> bool:
    """Whether this machine has a CUDA device (the GPU path of `surgery apply --engine sglang`)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch: no CUDA
        return False


def run_engine(kwargs: dict, prompts: list[list[int]], max_new_tokens: int = MAX_TOKENS, *, recipe: str | None = None,
               timeout: float = 600, workdir=None, top_logprobs: int = 0) -> dict:
    """Start one SGLang Engine in a child process, generate greedily, shut it down. Returns the
    outputs, per-request meta_info, timings, the hook's report events and its log lines, or an
    `error` with the output's tail. `top_logprobs` N > 0: also `top` (per prompt, per output position,
    the N best [token, logprob]): a greedy reference says with them where its choice was a near-tie;
    and `scored` (the same positions' N best when the engine scores prompt + output again in one
    prefill forward, `_scored_top`) and `noise` (surgery.greedyties.margin_noise of the two): what
    counts as a tie in this engine and dtype."""
    from .log import APPLIED

    root = str(Path(__file__).resolve().parents[2])
    workdir = Path(workdir or tempfile.mkdtemp(prefix="surgery-sglang-"))
    workdir.mkdir(parents=True, exist_ok=True)
    report_file = workdir / "surgery_report.jsonl"
    report_file.unlink(missing_ok=True)
    env = dict(os.environ)
    env.pop("SURGERY_RECIPE", None)
    if recipe is not None:
        env["SURGERY_RECIPE"] = recipe
        env["SURGERY_REPORT"] = str(report_file)
    paths = [root]
    if recipe is not None and not plugin_registered():
        paths.append(str(entry_point_dir(workdir / "entry_point")))
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    request = json.dumps({"kwargs": kwargs, "prompts": prompts, "max_new_tokens": max_new_tokens,
                          "top_logprobs": top_logprobs})
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "surgery.sglang.engine"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=root,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(request, timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and the scheduler it spawned, nothing else
        out, _ = proc.communicate()
        rc = "timeout"
    from .report import read

    res: dict = {"rc": rc, "wall_s": round(time.perf_counter() - t, 2), "recipe": recipe,
                 "report": read(report_file) if recipe is not None else None,
                 "log_lines": [line.split("spec-surgery: ", 1)[1] for line in out.splitlines() if "spec-surgery: " in line],
                 "applied_lines": APPLIED.find(out)}
    found = [line for line in out.splitlines() if line.startswith(RESULT_TAG)]
    if found:
        res.update(json.loads(found[-1][len(RESULT_TAG):]))
        if res.get("scored") is not None:
            res["noise"] = greedyties.margin_noise(res.get("top"), res["scored"], dtype=kwargs.get("dtype"),
                                                   shape="one prefill forward over prompt + greedy output")
    else:
        codes = sorted({w for w in out.replace(":", " ").split() if w.startswith("SRG") and w[3:].isdigit()})
        res["error"] = f"no result (exit {rc}){'; codes in the output: ' + ', '.join(codes) if codes else ''}"
        res["codes"] = codes
    res["tail"] = out[-6000:]
    return res


def decode_summary(reference: list[list[int]], outputs: list[list[int]], metas: list[dict], num_draft_tokens: int,
                   reference_top: list | None = None, noise: dict | None = None) -> dict:
    """Output identity against the greedy reference and SGLang's own acceptance counters, summed over
    the prompts; where outputs differ, `divergences` (with `reference_top`: the margins there, judged
    against `noise`, the greedy engine's measured numerical noise: surgery.greedyties.summary)."""
    mismatched = [i for i, (a, b) in enumerate(zip(reference, outputs)) if a != b]
    mismatched += list(range(min(len(reference), len(outputs)), max(len(reference), len(outputs))))
    verify = sum(int(m.get("spec_verify_ct") or 0) for m in metas)
    accepted = sum(int(m.get("spec_num_correct_drafts") or 0) for m in metas)
    proposed = sum(int(m.get("spec_num_proposed_drafts") or 0) for m in metas)
    completion = sum(int(m.get("completion_tokens") or 0) for m in metas)
    return {"identical": not mismatched, "mismatched_prompts": mismatched, "prompts": len(outputs),
            "num_draft_tokens": num_draft_tokens, "verify_ct": verify, "drafted": proposed, "accepted": accepted,
            "acceptance_rate": accepted / proposed if proposed else 0.0,
            "accept_length": completion / verify if verify else None, "completion_tokens": completion,
            "counters_present": any("spec_verify_ct" in m for m in metas),
            **greedyties.summary(reference, outputs, reference_top, noise)}


def _child() -> int:
    """`python -m surgery.sglang.engine` with the request as JSON on stdin (run_engine)."""
    req = json.loads(sys.stdin.read())
    import sglang as sgl

    t = time.perf_counter()
    engine = sgl.Engine(**req["kwargs"])
    start_s = time.perf_counter() - t
    try:
        t = time.perf_counter()
        extra = {"return_logprob": True, "top_logprobs_num": req["top_logprobs"]} if req.get("top_logprobs") else {}
        outs = engine.generate(input_ids=req["prompts"],
                               sampling_params={"temperature": 0, "max_new_tokens": req["max_new_tokens"]}, **extra)
        gen_s = time.perf_counter() - t
        scored = _scored_top(engine, req["prompts"], [list(o["output_ids"]) for o in outs], req["top_logprobs"]) \
            if req.get("top_logprobs") else None
    finally:
        try:
            engine.shutdown()
        except Exception as exc:  # noqa: BLE001 - the outputs are in; a shutdown problem is said
            print(f"engine.shutdown: {type(exc).__name__}: {exc}", flush=True)
    import torch

    result = {"sglang": getattr(sgl, "__version__", "unknown"), "torch": torch.__version__,
              "engine_start_s": round(start_s, 2), "generate_s": round(gen_s, 3),
              "outputs": [list(o["output_ids"]) for o in outs],
              "meta": [{k: v for k, v in (o.get("meta_info") or {}).items()
                        if k.startswith("spec_") or k in ("completion_tokens", "prompt_tokens", "e2e_latency")}
                       for o in outs]}
    if req.get("top_logprobs"):  # meta_info output_top_logprobs: per position [(logprob, token_id, text), ...]
        result["top"] = [[[[int(t), float(lp)] for lp, t, *_ in (pos or ())]
                          for pos in (o.get("meta_info") or {}).get("output_top_logprobs") or ()] for o in outs]
        result["scored"] = scored
    print(RESULT_TAG + json.dumps(result, default=str), flush=True)
    return 0


def _scored_top(engine, prompts: list[list[int]], outputs: list[list[int]], top: int) -> list:
    """Each prompt + its greedy output scored again in one prefill forward (the verify pass's shape,
    several tokens per forward): per prompt, per output position, the `top` best [token, logprob].
    logprob_start_len 0 keeps the radix cache from serving the prefix (SGLang matches a prefix only up
    to the logprob start); meta_info input_top_logprobs[k] ranks the candidates for input token k
    (entry 0 is None), so the output positions start at len(prompt)."""
    outs = engine.generate(input_ids=[list(p) + list(o) for p, o in zip(prompts, outputs)],
                           sampling_params={"temperature": 0, "max_new_tokens": 1}, return_logprob=True,
                           logprob_start_len=0, top_logprobs_num=top)
    return [scored_positions((o.get("meta_info") or {}).get("input_top_logprobs"), len(p))
            for o, p in zip(outs, prompts)]


def scored_positions(input_top: list | None, start: int) -> list:
    """meta_info input_top_logprobs (per input position [(logprob, token_id, text), ...] or None) from
    `start` on, as [token, logprob] lists."""
    return [[[int(t), float(lp)] for lp, t, *_ in (pos or ())] for pos in (input_top or [])[start:]]


if __name__ == "__main__":
    raise SystemExit(_child())
