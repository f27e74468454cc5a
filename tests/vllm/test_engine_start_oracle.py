"""Engine-start oracle (issue 42): for real public config pairs x --tp {1, 2, 3, 4, 8} x --pp {1, 2} x a
few --max-model-len and --kv-cache-dtype values, vLLM 0.32's own engine config is built on CPU
(`EngineArgs(model=folder, speculative_config=..., load_format="dummy").create_engine_config()`, from
the config folders, no weights) and `surgery validate --engine vllm` must agree:

- where vLLM refuses, surgery refuses with the code that names the same limit (SRG340 heads vs tp,
  SRG341 KV heads vs tp, SRG342 max_model_len, SRG343 cache dtype, SRG350 the target's own KV sharing
  split by the pipeline);
- where vLLM accepts, surgery raises no error except a named silent failure (SILENT below).

Two refusals live in vLLM's worker, not in create_engine_config; their inputs are read from the
VllmConfig vLLM built and the check is reproduced as the worker runs it:
- QKVParallelLinear.__init__ (vllm/model_executor/layers/linear.py:1053-1058): tp >= KV heads ->
  divide(tp, kv), else divide(kv, tp) (distributed/utils.py ensure_divisibility asserts), for the
  target and the draft at their tp, MLA models excepted (model_config.use_mla);
- Gemma 4's KV-shared tail under pipeline parallelism: gemma4.py:471-491 names each shared layer's
  target (the last non-shared layer of its type), layers/attention/attention.py:83
  validate_kv_sharing_target raises when that layer is not on the stage (distributed/utils.py
  get_pp_indices places the layers).

What is patched, and why (the CPU machine, not the config): transformers' Gemma4Processor cannot be
imported without torchvision, which the CI venv lacks, so vLLM cannot inspect
Gemma4ForConditionalGeneration; the Gemma 4 targets are served as their text class Gemma4ForCausalLM
(hf_overrides architectures; same text config, same heads and lengths: every check compared here is
ModelConfig's). Nothing else: create_engine_config on CPU does not compare tp x pp with the devices.
Left out: MiMo-7B-RL (model_type `mimo` needs the checkpoint's remote code, which config folders do
not carry, so vLLM refuses every case for a reason that is not a limit). vLLM is built in-process once per case (~10 ms after the first per architecture); surgery runs
in-process with the configs read once per file (the facts cache).
"""
from __future__ import annotations

import json
import logging
from functools import lru_cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "tests" / "data" / "configs"
SHARED = REPO.parent / "shared" / "configs"

# (id, recipe, target, draft, method)
PAIRS = [
    ("llama31-eagle3", "eagle3", CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json", "eagle3"),
    ("llama31-eagle", "eagle", CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "EAGLE-LLaMA3.1-Instruct-8B.json", "eagle"),
    ("llama31-draft-model", "draft-model", CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "Llama-3.2-1B-Instruct.json",
     "draft_model"),
    ("gemma4-e2b", "gemma4-mtp", CONFIGS / "gemma-4-E2B-it.json", CONFIGS / "gemma-4-E2B-it-assistant.json", "mtp"),
    ("deepseek-v3-mtp", "deepseek-mtp", CONFIGS / "DeepSeek-V3.json", CONFIGS / "DeepSeek-V3.json", "mtp"),
    ("qwen3-next-mtp", "mtp", CONFIGS / "Qwen3-Next-80B-A3B-Instruct.json", CONFIGS / "Qwen3-Next-80B-A3B-Instruct.json", "mtp"),
    ("glm45-air-mtp", "mtp", CONFIGS / "GLM-4.5-Air.json", CONFIGS / "GLM-4.5-Air.json", "mtp"),
    ("kimi-k2-eagle3", "eagle3", CONFIGS / "Kimi-K2-Instruct.json",
     CONFIGS / "kimi-k2-eagle3-specforge.json", "eagle3"),
    ("phi4-mini-eagle3", "eagle3", CONFIGS / "Phi-4-mini-instruct.json", CONFIGS / "phi4-mini-eagle3-specforge.json",
     "eagle3"),
]
if (SHARED / "gemma4" / "gemma-4-E4B-it.json").is_file():
    PAIRS.append(("gemma4-e4b", "gemma4-mtp", SHARED / "gemma4" / "gemma-4-E4B-it.json",
                  SHARED / "gemma4" / "gemma-4-E4B-it-assistant.json", "mtp"))

# (tp, pp, max_model_len, kv_cache_dtype): the tp x pp grid at the configs' own length, then lengths
# (131072: within every target here; 200000: within Qwen3-Next's 262144 only; 1000000: none) and cache
# dtypes (fp8 known, fp9 not)
GRID = ([(tp, pp, None, "auto") for tp in (1, 2, 3, 4, 8) for pp in (1, 2)]
        + [(1, 1, 131072, "auto"), (2, 1, 200000, "auto"), (1, 1, 1000000, "auto"), (2, 1, None, "fp8"),
           (1, 1, None, "fp9")])
CASES = [(p, g) for p in PAIRS for g in GRID]

# errors surgery may raise where vLLM starts: named silent failures (vLLM runs, and runs wrongly)
SILENT = {
    "SRG352": "the Gemma 4 target drops its per-layer inputs on every stage after the first (decodes wrongly)",
}
# gemma4-mtp pp 2: the assistant's input embedding placeholder is kept on the last stage (recipe
# gemma4-mtp.yaml: vLLM silently keeps the placeholder); SRG311 is that named silent failure there
SILENT_BY_RECIPE = {"gemma4-mtp": {"SRG311": "the assistant keeps its embedding placeholder under pp (recipe step 3)"}}


def _folder(src: Path, root: Path) -> Path:
    """A model folder with the config.json as published (our `_` annotations dropped)."""
    out = root / f"{src.parent.name}-{src.stem}"
    if not out.is_dir():
        out.mkdir(parents=True)
        cfg = {k: v for k, v in json.loads(src.read_text(encoding="utf-8")).items() if not k.startswith("_")}
        (out / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine_start")
    return lambda src: _folder(src, root)


def _engine_args(target: Path, draft: Path, method: str, tp: int, pp: int, mml, kv: str):
    from vllm.engine.arg_utils import EngineArgs

    cfg = json.loads((target / "config.json").read_text())
    overrides = {"architectures": ["Gemma4ForCausalLM"]} \
        if cfg.get("architectures") == ["Gemma4ForConditionalGeneration"] else {}  # torchvision: see the docstring
    return EngineArgs(model=str(target), speculative_config={"method": method, "model": str(draft),
                                                             "num_speculative_tokens": 2},
                      tensor_parallel_size=tp, pipeline_parallel_size=pp, max_model_len=mml, kv_cache_dtype=kv,
                      load_format="dummy", skip_tokenizer_init=True, enforce_eager=True, hf_overrides=overrides)


def _worker_qkv(model_config, tp: int) -> str | None:
    """linear.py:1053-1058 QKVParallelLinear.__init__ on vLLM's own numbers."""
    if model_config.use_mla:
        return None
    kv = model_config.get_total_num_kv_heads()
    num, den = (tp, kv) if tp >= kv else (kv, tp)
    return None if num % den == 0 else f"{num} is not divisible by {den}"


def _worker_kv_sharing(model_config, pp: int) -> str | None:
    """gemma4.py:471-491 (each KV-shared layer's target) + get_pp_indices + attention.py:83."""
    from vllm.distributed.utils import get_pp_indices

    text = model_config.hf_text_config
    n, shared = text.num_hidden_layers, getattr(text, "num_kv_shared_layers", 0) or 0
    if pp == 1 or not shared:
        return None
    first = n - shared
    prev = list(text.layer_types[:first])
    stages = [get_pp_indices(n, r, pp) for r in range(pp)]
    for start, end in stages:
        for layer in range(max(start, first), end):
            source = len(prev) - 1 - prev[::-1].index(text.layer_types[layer])
            if not start <= source < end:
                return f"Specified KV sharing target layer for layer {layer} is not valid: target layer {source} " \
                       "is not a valid Attention layer in the model."
    return None


LIMITS = [("Total number of attention heads", "SRG340"), ("is greater than the derived max_model_len", "SRG342"),
          ("cache_dtype", "SRG343")]


def vllm_verdict(target: Path, draft: Path, method: str, tp: int, pp: int, mml, kv: str) -> tuple[str | None, str]:
    """(the code of the limit vLLM refuses on, or None where it starts; vLLM's own message)."""
    try:
        config = _engine_args(target, draft, method, tp, pp, mml, kv).create_engine_config()
    except Exception as exc:  # noqa: BLE001 - vLLM's refusal, classified below
        text = str(exc)
        code = next((c for needle, c in LIMITS if needle in text), None)
        assert code is not None, f"a vLLM refusal this oracle does not know: {type(exc).__name__}: {text[:600]}"
        return code, text
    spec = config.speculative_config
    for mc, size in ((config.model_config, tp), (spec.draft_model_config, spec.draft_parallel_config.tensor_parallel_size)):
        said = _worker_qkv(mc, size)
        if said:
            return "SRG341", said
    said = _worker_kv_sharing(config.model_config, pp)
    if said:
        return "SRG350", said
    return None, ""


def surgery_errors(run_cli, recipe, target, draft, tp, pp, mml, kv) -> set[str]:
    args = ["validate", recipe, "--target", target, "--draft", draft, "--engine", "vllm", "--tp", tp, "--pp", pp,
            "--kv-cache-dtype", kv, "--json"]
    if mml is not None:
        args += ["--max-model-len", mml]
    code, out, err = run_cli(*args)
    assert code in (0, 1), (code, err[-2000:])
    data = json.loads(out)
    return {d["code"] for d in data["diagnostics"] if d["severity"] == "error"}


@pytest.fixture(scope="module")
def quiet_vllm():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def test_cache_dtype_list_is_vllms():
    from typing import get_args

    from vllm.config.cache import CacheDType

    from surgery.checks.engine_start import cache_dtypes

    assert cache_dtypes() == get_args(CacheDType)


def test_pp_refusals_are_vllms():
    """start_limits.pipeline lists exactly the generation architectures whose class is no SupportsPP."""
    import vllm_mtp_oracle as oracle

    from surgery.checks.engine_start import limits

    without = set(oracle.generation_architectures()) - set(oracle.architectures_with_interface("SupportsPP"))
    assert sorted(limits()["pipeline"]["architectures_without_pp"]) == sorted(without)


@pytest.mark.usefixtures("quiet_vllm")
def test_engine_start_oracle(folders, run_cli):
    """Every case, one test (one report): vLLM's verdict, ours, and where they differ."""
    wrong, refused, by_code = [], 0, {}
    for (name, recipe, target, draft, method), (tp, pp, mml, kv) in CASES:
        t, d = folders(target), folders(draft)
        code, said = vllm_verdict(t, d, method, tp, pp, mml, kv)
        ours = surgery_errors(run_cli, recipe, target, draft, tp, pp, mml, kv)
        label = f"{name} tp={tp} pp={pp} max_model_len={mml} kv={kv}"
        if code is not None:
            refused += 1
            by_code[code] = by_code.get(code, 0) + 1
            if code not in ours:
                wrong.append(f"{label}: vLLM refuses ({code}: {said[:200]}), surgery says {sorted(ours) or 'no error'}")
        else:
            allowed = set(SILENT) | set(SILENT_BY_RECIPE.get(recipe, {}))
            if ours - allowed:
                wrong.append(f"{label}: vLLM starts, surgery errors {sorted(ours - allowed)}")
    print(f"engine-start oracle: {len(CASES)} cases, {refused} vLLM refusals {dict(sorted(by_code.items()))}")
    assert len(CASES) >= 100 and refused >= 25, (len(CASES), refused)
    assert set(by_code) == {"SRG340", "SRG341", "SRG342", "SRG343", "SRG350"}, by_code  # every limit is exercised
    assert not wrong, "\n".join(wrong)
