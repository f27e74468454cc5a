"""The construct oracle (issue 65, "ask the engine where the rules run out"): each grid case (grid.py, the
serving-length rows aside) is answered by vLLM 0.26.0's and 0.34.0's own config layer, then by their
target and draft classes constructed on the meta device at the case's tp / pp (surgery/engine/ask/
vllm_runner.py, `surgery validate --engine-check`'s runner, in each release's oracle venv). Every refusal
made while constructing must be said by `surgery validate --engine-version <release>` with the code that
names that limit (CONSTRUCT_LIMITS), or be listed in UNSAID with the reason surgery does not say it yet;
every error surgery raises only for the build (test_release_oracle.AT_BUILD) must be a construction
refusal of the release. The runs start with the release oracle's, side by side (conftest.py).
A release whose venv is missing is one skipped test with the reason (venvs.py), never a pass.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import venvs  # noqa: E402
from conftest import CONSTRUCT_RELEASES  # noqa: E402
from oracle_cases import construct_cases  # noqa: E402

# tp-divisibility codes: the constructor raises at the first divide() that fails, which for one setting may
# be another width than the one surgery's line names (Qwen3-Next at tp 12: the vocabulary divides first,
# SRG754 names the Gated DeltaNet widths); any of them says the setting is refused for its tp
DIVIDES = {"SRG340", "SRG341", "SRG754", "SRG756"}
# (needle in the release's construction refusal: its message or the frame that raised it) -> the codes
# surgery may name that limit with
CONSTRUCT_LIMITS = [
    ("is not divisible by", DIVIDES),  # divide() in QKVParallelLinear, VocabParallelEmbedding, the GDN layers
    ("self.total_num_kv_heads % tp_size == 0", {"SRG341"}),  # llama.py's bare assert (Phi-4-mini at tp 3)
    ("Specified KV sharing target layer", {"SRG350"}),  # Gemma 4's KV-shared tail split over pp stages
    ("no attribute 'markov_rank'", {"SRG681"}),  # qwen3_dspark.py reads the top-level key with no default
    # 0.25-0.28 rewrite a qwen3 DSpark head to DeepSeek-V4's DSparkDraftModel, which reads hc_mult
    ("no attribute 'hc_mult'", {"SRG753"}),
    # an EAGLE-1 head numbering its layers from the last stage's layer count (llama_eagle.py) at pp > 1
    ("Duplicate layer name", {"SRG346"}),
]
# construction refusals surgery does not say yet (a rule to write), each with why
UNSAID: dict[str, str] = {}
AT_BUILD_CODES = {"SRG681"}


def construct_codes(message: str, where: str | None, frames) -> set[str]:
    text = " ".join([message or "", where or "", *(frames or [])])
    return next((codes for needle, codes in CONSTRUCT_LIMITS if needle in text), set())


def surgery_errors(run_cli, case: dict, release: str) -> set[str]:
    args = ["validate", case["recipe"], "--target", case["target_src"], "--draft", case["draft_src"], "--engine", "vllm",
            "--engine-version", release, "--tp", case["tp"], "--pp", case["pp"], "--kv-cache-dtype",
            case["kv_cache_dtype"], "--json"]
    code, out, err = run_cli(*args)
    assert code in (0, 1), (case["id"], code, err[-2000:])
    return {d["code"] for d in json.loads(out)["diagnostics"] if d["severity"] == "error"}


@pytest.mark.parametrize("release", CONSTRUCT_RELEASES)
def test_construct_oracle(release, cases, run_cli, oracle_runs):
    py, why = venvs.oracle_python(release)
    if py is None:
        pytest.skip(why)
    run = oracle_runs[("construct", release)]
    answer = run.result()
    assert answer["engine"] == "vllm" and answer["version"].split("+")[0] == release, answer.get("version")
    asked = construct_cases(cases)
    verdicts = {v["id"]: v for v in answer["verdicts"]}
    assert set(verdicts) == {c["id"] for c in asked}
    wrong, said, unsaid, unjudged, built = [], {}, {}, [], 0
    for case in asked:
        v = verdicts[case["id"]]
        if v["stage"] == "unjudged":
            unjudged.append(f"{case['id']}: {(v.get('message') or '')[:120]}")
            continue
        if v["stage"] is None:
            built += 1
            assert v["shapes"]["target"], case["id"]  # constructed: its parameters are reported
        if v["stage"] == "construct":
            codes = construct_codes(v["message"], v.get("where"), v.get("frames"))
            reason = next((n for n in UNSAID if n in v["message"]), None)
            ours = surgery_errors(run_cli, case, release)
            if codes & ours:
                code = min(codes & ours)
                said[code] = said.get(code, 0) + 1
            elif reason is not None:
                unsaid[reason] = unsaid.get(reason, 0) + 1
            else:
                wrong.append(f"{case['id']}: {release} refuses at construction ({v['type']}: {v['message'][:200]} "
                             f"at {v.get('where')}), surgery says {sorted(ours) or 'no error'}")
        elif case["recipe"] == "dspark" and v["stage"] is None:
            # an error surgery raises for the build only must be a construction refusal of the release
            extra = surgery_errors(run_cli, case, release) & AT_BUILD_CODES
            if extra:
                wrong.append(f"{case['id']}: {release} constructs both classes, surgery errors {sorted(extra)}")
    print(f"construct oracle vLLM {release}: {len(asked)} cases in {run.seconds:.0f} s (peak RSS "
          f"{answer.get('peak_rss_kb', 0) // 1024} MiB); {built} constructed, {sum(said.values())} construction "
          f"refusals said by surgery {dict(sorted(said.items()))}, {sum(unsaid.values())} not said yet "
          f"{ {k[:40]: n for k, n in unsaid.items()} }; {len(unjudged)} not judgeable on this CPU build "
          f"({'; '.join(unjudged[:3])})")
    assert built >= 40 and sum(said.values()) >= 4, (built, said)
    assert not wrong, f"{len(wrong)} construction verdicts of vLLM {release} disagree with surgery:\n" + "\n".join(wrong)
