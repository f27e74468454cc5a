"""SGLang is its own oracle (issue 65): the grid (grid.py) is answered by SGLang 0.5.23's own parser,
server-argument resolution, model configs and model constructors (surgery/engine/ask/sglang_runner.py,
in the release's venv: scripts/sglang_oracle_venv.sh), and `surgery validate --engine sglang
--engine-version 0.5.23` must agree with it case by case:

- where SGLang refuses, surgery refuses with the code that names the same limit (LIMITS);
- where it accepts, surgery raises no error but a named silent failure (SILENT);
- no finding surgery makes on an SGLang verdict is one that speaks for vLLM only (VLLM_ONLY).

Without the venv each test skips with the reason, never passes.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from sglang_oracle import early  # noqa: E402

grid = early.load_grid()  # by path: `import grid` gave tests/release_oracle/grid.py in a whole-suite run

from testpaths import ROOT  # noqa: E402

RELEASE = "0.5.23"
VENV = ROOT / ".cache" / "oracles" / f"sglang-{RELEASE}"
# SGLang's message (or the source line of a bare assert) -> the code surgery names that limit with
LIMITS = [
    ("argument --kv-cache-dtype", "SRG770"),
    ("DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype", "SRG770"),
    ("argument --attention-backend", "SRG771"),
    ("not supported with Flex Attention backend", "SRG771"),
    ("Gemma4 only supports", "SRG771"),
    ("is greater than the derived context_length", "SRG772"),
    ("only supports pp_size == 1", "SRG773"),
    ("DSpark pipeline parallelism requires PD prefill", "SRG773"),
    ("per-layer-input (PLE) embeddings under CUDA graph", "SRG773"),
    ("pp_group.is_first_rank and self.pp_group.is_last_rank", "SRG773"),
    ("is not a registered", "SRG774"),
    ("% tp_size == 0", "SRG775"),
    ("tp_size % self.total_num_kv_heads == 0", "SRG775"),
    ("% attn_tp_size == 0", "SRG775"),
    ("is not divisible by", "SRG775"),
    ("DSpark requires markov_rank > 0", "SRG776"),
    ("DSpark V4 draft requires markov_rank > 0", "SRG776"),
    ("moe_layer_freq", "SRG777"),
]
# errors surgery may raise where SGLang starts: named silent failures (it runs, and runs wrongly)
SILENT = {
    "SRG778": "an EAGLE-1 head written as LlamaForCausalLM is built as a plain Llama, its fc dropped",
    "SRG779": "the EAGLE-3 capture hands the head other target layers than it was trained on",
}


def oracle_python() -> tuple[str | None, str]:
    py = VENV / "bin" / "python"
    if py.is_file() and (VENV / ".stamp").is_file():
        return str(py), ""
    log = ROOT / ".cache" / "oracles" / f"sglang-{RELEASE}.log"
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:] if log.is_file() else []
    why = f"the SGLang {RELEASE} oracle venv is not built (bash scripts/sglang_oracle_venv.sh {RELEASE})"
    return None, why + (": " + " | ".join(tail)[-400:] if tail else "")


def vllm_only_codes() -> set[str]:
    """Codes the catalogue says speak for vLLM only (codes.yaml `engines: [vllm]`)."""
    from surgery.text.diagnostics import catalogue

    return {code for code, row in catalogue().items() if (row.get("engines") or ["vllm", "sglang", "hf"]) == ["vllm"]}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    if early.started() is not None:  # the grid the runner was started on at collection (early.py)
        return early.started().cases
    root = tmp_path_factory.mktemp("sglang_oracle")
    return [grid.materialise(c, root) for c in grid.cases()]


@pytest.fixture(scope="module")
def answers(cases):
    """SGLang's answers, one runner process for the grid and one for its lists."""
    from surgery.engine.ask import ask_run

    py, why = oracle_python()
    if py is None:
        pytest.skip(why)
    runs = early.started()
    if runs is not None and runs.cases is cases:  # started at collection, beside the other tests (early.py)
        run = runs.result("grid")
    else:
        run = ask_run("sglang", py, cases, timeout_s=1500)
    assert run.failure is None, (run.failure, run.detail[-3000:])
    assert run.version == RELEASE, run.version
    if runs is not None and runs.cases is cases:
        facts = runs.result("facts")
    else:
        facts = ask_run("sglang", py, {"facts": True}, timeout_s=600)  # type: ignore[arg-type]
    return {v["id"]: v for v in run.verdicts}, facts


def classify(verdict: dict) -> str | None:
    if verdict.get("stage") in (None, "unjudged"):
        return None
    text = " ".join([verdict.get("message") or ""] + list(verdict.get("frames") or [])[-1:])
    return next((code for needle, code in LIMITS if needle in text), "UNKNOWN")


def surgery_verdict(run_cli, monkeypatch, case: dict) -> list[dict]:
    for key in ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",):
        monkeypatch.delenv(key, raising=False)
    for key, value in (case.get("env") or {}).items():
        monkeypatch.setenv(key, value)
    args = ["validate", case["recipe"], "--target", case["target_src"], "--draft", case["draft_src"], "--engine",
            "sglang", "--engine-version", RELEASE, "--method", case["method"], "--tp", case["tp"], "--pp", case["pp"],
            "--kv-cache-dtype", case["kv_cache_dtype"], "--num-speculative-tokens", case["k"], "--json"]
    if case["max_model_len"] is not None:
        args += ["--max-model-len", case["max_model_len"]]
    if case["attention_backend"]:
        args += ["--attention-backend", case["attention_backend"]]
    code, out, err = run_cli(*args)
    assert code in (0, 1), (case["id"], code, err[-2000:])
    return json.loads(out)["diagnostics"]


def test_sglang_grid_agrees_with_sglang(cases, answers, run_cli, monkeypatch):
    verdicts, _ = answers
    wrong, by_code, unconstructed, foreign = [], {}, [], []
    vllm_only = vllm_only_codes()
    for case in cases:
        v = verdicts[case["id"]]
        code = classify(v)
        assert code != "UNKNOWN", f"{case['id']}: a refusal this oracle does not know: {v['message'][:400]} " \
                                  f"{v.get('where')} {v.get('frames', [])[-1:]}"
        if v.get("unconstructed"):
            unconstructed.append(f"{case['id']}: {v['unconstructed'][0][:160]}")
        diags = surgery_verdict(run_cli, monkeypatch, case)
        ours = {d["code"] for d in diags if d["severity"] == "error"}
        foreign += [f"{case['id']}: {d['code']} ({d['severity']})" for d in diags if d["code"] in vllm_only]
        if v.get("stage") == "unjudged" or (code is None and v.get("unconstructed")):
            continue  # a model this CPU venv could not build: not judged as started (listed above)
        if code is None and case["max_model_len"] is None:
            # the derived context length, as SGLang derived it (what SRG772 compares)
            from surgery.checks.sglang_start import context_length

            derived = context_length(json.loads(Path(case["target_src"]).read_text(encoding="utf-8")))
            if derived != v["observed"].get("target_context_len"):
                wrong.append(f"{case['id']}: SGLang derives the target's context length "
                             f"{v['observed'].get('target_context_len')}, surgery {derived}")
        if code is not None:
            by_code[code] = by_code.get(code, 0) + 1
            if code not in ours:
                wrong.append(f"{case['id']}: SGLang refuses ({code}: {v['message'][:160]} at {v.get('where')}), "
                             f"surgery says {sorted(ours) or 'no error'}")
        elif ours - set(SILENT):
            wrong.append(f"{case['id']}: SGLang starts, surgery errors {sorted(ours - set(SILENT))}: "
                         + "; ".join(d["message"][:140] for d in diags if d["code"] in ours - set(SILENT)))
    refused = sum(by_code.values())
    print(f"SGLang {RELEASE} oracle: {len(cases)} cases, {refused} refusals {dict(sorted(by_code.items()))}; "
          f"{len(unconstructed)} with a part this CPU venv could not construct")
    assert len(cases) >= 100 and refused >= 30, (len(cases), refused)
    assert not wrong, f"{len(wrong)} of {len(cases)} cases disagree with SGLang {RELEASE}:\n" + "\n".join(wrong)
    assert not foreign, "findings that speak for vLLM only on SGLang verdicts:\n" + "\n".join(foreign)


def test_sglang_lists_are_the_releases(answers):
    """The wheel-read lists (tools/sglang_limit_facts.py, surgery/data/releases/sglang.json `start`) against
    the release's imported parser and model registry."""
    from surgery.engine.releases import release_data

    _, facts = answers
    assert facts.failure is None, (facts.failure, facts.detail[-2000:])
    answer = facts.facts
    start = release_data("sglang")["releases"][RELEASE]["start"]
    assert answer["choices"]["kv_cache_dtype"] == start["kv_cache_dtypes"]
    assert answer["choices"]["attention_backend"] == start["attention_backends"]
    registered = set(answer["architectures"])  # the classes whose module imports on this CPU venv
    read = set(start["architectures"])
    assert registered <= read, f"classes SGLang registers that the wheel reader missed: {sorted(registered - read)}"
    print(f"SGLang {RELEASE} registry: {len(registered)} classes imported here, all read from the wheel; "
          f"{len(read - registered)} more read whose module does not import on this CPU venv")
    assert len(registered) >= 200, len(registered)
