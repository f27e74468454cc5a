"""Every release is its own oracle (issue 53): the grid (grid.py) is answered by vLLM 0.26.0, 0.32.0 and
0.34.0's own config layers and load-time checks (runner.py, in each release's venv), and
`surgery validate --engine vllm --engine-version <release>` must agree with each:

- where the release refuses, surgery refuses with the code that names the same limit (LIMITS);
- where it accepts, surgery raises no error but a named silent failure (SILENT).

A release whose venv is missing is one skipped test with the reason (venvs.py), never a pass.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import grid  # noqa: E402
import venvs  # noqa: E402
# the grid's cases and every oracle run (this file's and test_construct_oracle.py's) are session fixtures,
# started together on first use: conftest.py
from oracle_cases import all_cache_dtypes, facts_asked as _facts_asked  # noqa: E402,F401

# needle in the release's refusal -> the code surgery names that limit with
LIMITS = [
    # issue 65's rewrites first: their pydantic messages quote the whole config (kv_cache_dtype included)
    ("must be divisible by n_predict", "SRG750"),
    ("FLy requires num_speculative_tokens", "SRG751"),
    ("'standard', 'synthetic' or 'block'", "SRG724"),  # no "fly" before 0.33
    ("sample_from_anchor=True is not supported for DFlash", "SRG752"),
    ("are not supported for now", "SRG723"),  # the draft class is not registered (SRG753: as vLLM renamed it)
    ("get_mamba_state_shape_from_config", "SRG754"),  # a linear-attention layer's width by tp (runner.py)
    ("Total number of attention heads", "SRG340"),
    ("is not divisible by", "SRG341"),
    ("is greater than the derived max_model_len", "SRG342"),
    ("cache_dtype", "SRG343"),
    ("Pipeline parallelism is not supported for this model", "SRG344"),
    ("with pipeline parallelism", "SRG345"),
    ("Specified KV sharing target layer", "SRG350"),
]
# errors surgery may raise where the release starts: named silent failures (it runs, and runs wrongly)
SILENT = {
    "SRG656": "the runner captures other target layers than the head was trained on (SpecForge's ids read one "
              "layer off: vllm#40551)",
    "SRG620": "an EAGLE / block draft shorter than the serving length where the release neither raises its "
              "position table nor stops drafting: out-of-bounds rotary reads (vllm#48894, vllm#57941)",
    "SRG352": "the Gemma 4 target drops its per-layer inputs on every stage after the first (decodes wrongly)",
}
# errors surgery may raise where the config layer accepts: failures while the release builds the draft
# model, after create_engine_config (the runner's load stage reproduces the KV-head split, Gemma 4's KV
# sharing and the aux-hidden-state relay, not every class's constructor)
AT_BUILD = {
    "SRG753": "a DSpark draft rewritten to DeepSeek-V4's DSparkDraftModel (model_type deepseek_v4) by 0.25-0.28's "
              "SpeculativeConfig: that class cannot be built from a qwen3 draft's config",
    "SRG681": "Qwen3DSparkModel reads config.markov_rank at the top level with no default (qwen3_dspark.py, "
              "0.26-0.34): SpecForge's nested dflash_config.markov_rank raises AttributeError at model build",
    "SRG346": "an EAGLE-1 head at pp > 1 numbers its layers from the last stage's layer count (llama_eagle.py "
              "get_num_layers(parallel_config), 0.30+): Attention refuses the duplicate layer name at model build "
              "(seen by tests/release_oracle/test_construct_oracle.py)",
}
SILENT_BY_RECIPE = {"gemma4-mtp": {"SRG311": "the assistant keeps its embedding placeholder under pp (recipe step 3)"}}
RESULTS: dict[str, dict] = {}


def classify(verdict: dict, case: dict | None = None) -> str | None:
    if verdict.get("stage") in (None, "unjudged"):
        return None
    text = verdict["message"]
    code = next((code for needle, code in LIMITS if needle in text), "UNKNOWN")
    if code == "SRG723" and case is not None:
        # the refused name is not the draft file's: vLLM renamed the class (EAGLEConfig) before asking
        said = json.loads(Path(case["draft_src"]).read_text(encoding="utf-8")).get("architectures") or []
        if not any(f"'{a}'" in text for a in said):
            return "SRG753"
    return code


def surgery_verdict(run_cli, case: dict, release: str) -> list[dict]:
    args = ["validate", case["recipe"], "--target", case["target_src"], "--draft", case["draft_src"], "--engine", "vllm",
            "--engine-version", release, "--tp", case["tp"], "--pp", case["pp"], "--kv-cache-dtype",
            case["kv_cache_dtype"], "--json"]
    if case["max_model_len"] is not None:
        args += ["--max-model-len", case["max_model_len"]]
    if case.get("k") is not None:  # the rewrite rows (grid.REWRITES) say their k; the others run the default
        args += ["--num-speculative-tokens", case["k"]]
    if (case.get("spec_extra") or {}).get("rejection_sample_method"):
        args += ["--rejection-sample-method", case["spec_extra"]["rejection_sample_method"]]
    code, out, err = run_cli(*args)
    assert code in (0, 1), (case["id"], code, err[-2000:])
    return json.loads(out)["diagnostics"]


def says_lowered(diags: list[dict]) -> bool:
    return any(d["code"] == "SRG620" and "lowers the target's max_model_len" in d["message"] for d in diags)


@pytest.mark.parametrize("release", venvs.RELEASES)
def test_release_oracle_grid(release, cases, run_cli, oracle_runs):
    py, why = venvs.oracle_python(release)
    if py is None:
        pytest.skip(why)
    answer = oracle_runs[("grid", release)].result()
    assert answer["vllm"].split("+")[0] == release, answer["vllm"]
    verdicts = {v["id"]: v for v in answer["verdicts"]}
    RESULTS[release] = verdicts
    wrong, by_code, unjudged = [], {}, []
    for case in cases:
        v = verdicts[case["id"]]
        if v["stage"] == "unjudged":  # the CPU build's runner refuses what a GPU's runs (runner.py)
            unjudged.append(case["id"])
            continue
        code = classify(v, case)
        assert code != "UNKNOWN", f"{release} {case['id']}: a refusal this oracle does not know: {v['message'][:600]}"
        diags = surgery_verdict(run_cli, case, release)
        ours = {d["code"] for d in diags if d["severity"] == "error"}
        if code is None and v.get("observed"):
            # what the release did with the lengths: a lowered serving length is said (SRG620), and only then
            from surgery.checks.inherit import derived_max_len

            asked = case["max_model_len"] or derived_max_len(json.loads(Path(case["target_src"]).read_text()))
            lowered = isinstance(asked, int) and v["observed"]["target_max_model_len"] < asked
            if lowered != says_lowered(diags):
                wrong.append(f"{case['id']}: {release} {'lowers' if lowered else 'keeps'} the serving length "
                             f"({v['observed']['target_max_model_len']} of {asked}), surgery says "
                             f"{'it lowers' if says_lowered(diags) else 'nothing of it'}")
        if code is not None:
            by_code[code] = by_code.get(code, 0) + 1
            if code not in ours:
                wrong.append(f"{case['id']}: {release} refuses ({code}: {v['message'][:200]}), surgery says "
                             f"{sorted(ours) or 'no error'}")
        else:
            allowed = set(SILENT) | set(AT_BUILD) | set(SILENT_BY_RECIPE.get(case["recipe"], {}))
            if ours - allowed:
                wrong.append(f"{case['id']}: {release} starts, surgery errors {sorted(ours - allowed)}")
    refused = sum(by_code.values())
    print(f"release oracle vLLM {release}: {len(cases)} cases, {refused} refusals {dict(sorted(by_code.items()))}; "
          f"{len(unjudged)} not judgeable on this CPU build ({', '.join(unjudged[:4])})")
    assert len(cases) - len(unjudged) >= 150 and refused >= 25, (len(cases), len(unjudged), refused)
    assert not wrong, f"{len(wrong)} of {len(cases)} cases disagree with vLLM {release}:\n" + "\n".join(wrong)


def test_releases_disagree_somewhere():
    """The grid is worth running per release: the releases' own answers differ on some cases (counted)."""
    missing = [r for r in venvs.RELEASES if r not in RESULTS]
    if missing:
        pytest.skip(f"needs every release's grid run first; missing {missing}")
    ids = list(RESULTS[venvs.RELEASES[0]])
    differ = [i for i in ids if len({classify(RESULTS[r][i]) for r in venvs.RELEASES}) > 1]
    print(f"release oracle: {len(differ)} of {len(ids)} cases differ between {', '.join(venvs.RELEASES)}")
    assert differ, "every release answered every case alike: the grid no longer tells releases apart"


@pytest.mark.parametrize("release", venvs.RELEASES)
def test_release_facts_are_the_releases_classes(release, oracle_runs):
    """The wheel-read facts (tools/releasefacts.py ClassIndex, committed in surgery/data/releases/vllm.json)
    against the release's imported classes: SupportsPP, the aux-hidden-state relay, the cache dtypes."""
    from surgery.engine.releases import release_data

    py, why = venvs.oracle_python(release)
    if py is None:
        pytest.skip(why)
    facts = release_data("vllm")["releases"][release]
    classes = facts["classes"]
    asked = _facts_asked(facts)
    answer = oracle_runs[("facts", release)].result()
    assert answer["cache_dtypes"] == facts["cache_dtypes"]
    drafts = set(facts.get("draft_architectures") or {})
    wrong, judged, unimportable = [], 0, []
    for arch in asked:
        row = answer["classes"][arch]
        if "error" in row or row.get("fallback"):
            unimportable.append(arch)
            continue
        judged += 1
        said_pp = arch in classes["draft_architectures_with_pp"] if arch in drafts \
            else arch not in classes["architectures_without_pp"]
        if row["pp"] != said_pp:
            wrong.append(f"{arch}: supports_pp {row['pp']}, the data says {said_pp}")
        if arch not in drafts and row.get("eagle3") and row.get("relay") is not None \
                and row["relay"] != (arch in classes["aux_hidden_states_over_pp"]):
            wrong.append(f"{arch}: relays aux hidden states over pp: {row['relay']}, the data says the opposite")
    print(f"release facts vLLM {release}: {judged} classes held to the release, {len(unimportable)} not importable "
          f"on this CPU venv or only as a CPU fallback class ({', '.join(unimportable[:6])}{' ...' if len(unimportable) > 6 else ''})")
    assert judged >= 40, (judged, unimportable)
    assert not wrong, "\n".join(wrong)
    # SRG703's fact: which attention classes read their copy of kv_sharing_target_layer_name (imported, MRO)
    copy, read_judged = facts["kv_sharing_copy"], []
    for name, row in (answer.get("kv_sharing_copy") or {}).items():
        if "error" in row:
            continue
        read_judged.append(name)
        if row["reads"] != (name in copy["reads"]):
            wrong.append(f"{name}: reads its kv_sharing_target_layer_name copy: {row['reads']}, the data says the opposite")
    print(f"release facts vLLM {release}: {len(read_judged)} attention classes' copy reads held to the release "
          f"({', '.join(sorted(read_judged))})")
    assert len(read_judged) >= 3 and not wrong, ("\n".join(wrong), read_judged)
