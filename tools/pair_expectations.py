"""The built-in pairs' expected vLLM acceptance (surgery/data/pairs/index.yaml `expect: {vllm: ...}`), computed
from the measured GPU runs in bench/results. Prints the YAML blocks; tests/test_pair_expectations.py checks
that index.yaml holds exactly what this computes from the files it names (no figure typed by hand).

    python tools/pair_expectations.py            # the blocks, to paste under each pair
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# pair -> (result file, key path to the run): the newest release each family ran on (docs/gpu.md sections
# 10-12; deepseek-mtp: the pair rebuilt with GPU-startable MLA dims, its 0.34 H100 run, docs/gpu.md section 17)
RUNS = {
    "eagle3": ("bench/results/gpu_vllm_families_v026_run1.json", ("eagle3", "recipe", "counters")),
    "eagle": ("bench/results/gpu_vllm_families_v026_run2.json", ("eagle", "recipe", "counters")),
    "draft-model": ("bench/results/gpu_vllm_families_v026_run2.json", ("draft-model", "recipe", "counters")),
    "mtp": ("bench/results/gpu_vllm_families_v026_run2.json", ("mtp", "recipe", "counters")),
    "deepseek-mtp": ("bench/results/vllm034_deepseek_mtp_2026-12-06.json", ("deepseek-mtp", "recipe", "counters")),
    "dflash": ("bench/results/gpu_vllm_families_blocks_v026_run1.json", ("dflash", "recipe", "counters")),
    "dspark": ("bench/results/gpu_vllm_families_blocks_v026_run2.json", ("dspark", "recipe", "counters")),
    "peagle": ("bench/results/gpu_vllm_families_blocks_v026_run2.json", ("peagle", "recipe", "counters")),
    "gemma4-mtp": ("bench/results/gpu_vllm_v026.json", ("spec_bf16_recipe", "acceptance")),
}
BY = "bench/gpu/vllm_families_gpu.py"


def expectation(pair: str) -> dict:
    """The `expect` mapping of one pair from its measured run: per-position acceptance (accepted at i /
    drafts) and mean accepted length (1 + accepted / drafts), with the run's release, card and date."""
    path, keys = RUNS[pair]
    data = json.loads((REPO / path).read_text())
    node = data
    for k in keys:
        node = node[k]
    if "num_drafts" in node:  # vLLM's counters
        drafts, per_pos = node["num_drafts"], node["num_accepted_tokens_per_pos"]
    else:  # bench/gpu/vllm_gpu.py's summary
        drafts = node["drafts"]
        per_pos = [round(r * drafts) for r in node["acceptance_per_position"]]
    release = data.get("versions", {}).get("vllm") or data.get("vllm")
    card = (data.get("versions", {}).get("device") or data.get("gpu") or "").replace("NVIDIA ", "")
    source = {"kind": "measured", "engine": "vllm", "release": str(release), "card": card, "dtype": "bfloat16",
              "prompts": "builtin", "drafts": str(drafts), "date": data["date"][:10], "file": path,
              "by": BY if keys[-1] == "counters" else "bench/gpu/vllm_gpu.py"}
    # the keys the run added to the pair's draft config for that release (bench older_vllm_spelling): the row is
    # the pair plus these, not the pair as shipped (issue 65; tests/test_pair_rows.py holds the verdicts to it)
    added = (data.get(keys[0]) or {}).get("older_vllm_spelling") if isinstance(data.get(keys[0]), dict) else None
    if added:
        source["config_added"] = json.dumps(added, sort_keys=True)
    return {"per_position": [round(a / drafts, 3) for a in per_pos],
            "mean_length": round(1 + sum(per_pos) / drafts, 2), "source": source}


def main() -> int:
    import yaml

    for pair in RUNS:
        sys.stdout.write(f"# {pair}\n" + yaml.safe_dump({"expect": {"vllm": expectation(pair)}}, sort_keys=False,
                                                         default_flow_style=None, width=200))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
