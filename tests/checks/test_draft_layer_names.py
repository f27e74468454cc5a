"""SRG346: an EAGLE-1 head at pp > 1 on a release that builds the draft at pp 1 on the last stage, where the
head numbers its layers from that stage's layer count (llama_eagle.py `get_num_layers(parallel_config)`) and
takes a target layer's name: vLLM 0.34 refuses at model build ("Duplicate layer name", construction seen by
tests/release_oracle/test_construct_oracle.py). Real public configs: yuhuili/EAGLE-LLaMA3.1-Instruct-8B and
EAGLE3-LLaMA3.1-Instruct-8B on meta-llama/Llama-3.1-8B-Instruct (32 layers)."""
from __future__ import annotations

import json

import pytest

from testpaths import CONFIGS

LLAMA = CONFIGS / "Llama-3.1-8B-Instruct.json"
EAGLE = CONFIGS / "EAGLE-LLaMA3.1-Instruct-8B.json"
EAGLE3 = CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json"


def errors(run_cli, recipe, draft, pp, version):
    rc, out, err = run_cli("validate", recipe, "--target", LLAMA, "--draft", draft, "--pp", str(pp),
                           "--engine-version", version, "--json")
    assert out.strip(), err
    return rc, {d["code"]: d for d in json.loads(out)["diagnostics"] if d["severity"] == "error"}


def test_eagle1_at_pp2_on_0_34_names_the_duplicate_layer(run_cli):
    rc, found = errors(run_cli, "eagle", EAGLE, 2, "0.34.0")
    assert rc == 1 and "SRG346" in found, found
    message = found["SRG346"]["message"]
    assert "Duplicate layer name: model.layers.16.self_attn.attn" in message and "layers 16-31" in message
    assert "3, 4" in found["SRG346"]["hint"]  # the pipeline sizes whose last stage the head's name misses


@pytest.mark.parametrize("pp", [3, 4])
def test_eagle1_where_the_last_stage_starts_above_the_count_is_not_refused(run_cli, pp):
    """pp 3: stage 22-31, count 10; pp 4: stage 24-31, count 8 (0.34 constructs both)."""
    _, found = errors(run_cli, "eagle", EAGLE, pp, "0.34.0")
    assert "SRG346" not in found, found


def test_eagle3_numbers_from_the_total_and_is_not_refused(run_cli):
    _, found = errors(run_cli, "eagle3", EAGLE3, 2, "0.34.0")
    assert "SRG346" not in found, found


def test_a_release_that_gives_the_draft_the_targets_pp_says_srg344_instead(run_cli):
    """0.26 builds the draft at the target's pipeline size: EagleLlamaForCausalLM is no SupportsPP (SRG344)."""
    _, found = errors(run_cli, "eagle", EAGLE, 2, "0.26.0")
    assert "SRG344" in found and "SRG346" not in found, found
