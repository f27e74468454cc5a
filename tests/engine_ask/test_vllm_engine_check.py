"""`surgery validate --engine-check` against a real vLLM release (0.34.0's oracle venv, built by
scripts/setup.sh --test; skipped with the reason without it): the release's classes constructed on meta at
the asked tp, its refusal quoted with its frame, and the constructed shapes against --weights headers."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "release_oracle"))
import venvs  # noqa: E402
from tiny_checkpoints import rand, write_folder  # noqa: E402

CONFIGS = ROOT / "tests" / "data" / "configs"
VERDICTS = ROOT / "tests" / "verdicts" / "configs"


@pytest.fixture(scope="module")
def py34():
    py, why = venvs.oracle_python("0.34.0")
    if py is None:
        pytest.skip(why)
    return py


def check(run_cli, *args) -> tuple[int, list[dict]]:
    code, out, err = run_cli("validate", *args, "--engine", "vllm", "--engine-version", "0.34.0", "--engine-check",
                             "--json")
    assert code in (0, 1), err[-2000:]
    return code, json.loads(out)["diagnostics"]


def ours(diags, prefix="SRG76"):
    return [d for d in diags if d["code"].startswith(prefix)]


def test_the_8b_pair_constructs_at_tp_2(run_cli, py34):
    _, diags = check(run_cli, "eagle3", "--target", CONFIGS / "Llama-3.1-8B-Instruct.json", "--draft",
                     CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json", "--tp", "2", "--engine-python", py34)
    found = ours(diags)
    assert [d["code"] for d in found] == ["SRG765"], found
    assert "vLLM 0.34.0: target 195 parameters, draft 12 parameters constructed on meta" in found[0]["message"]


def test_a_construction_refusal_the_config_layer_lets_pass(run_cli, py34):
    """Phi-4-mini (24 heads, 8 KV heads) at tp 3: 0.34's config layer accepts (3 divides 24), llama.py's
    constructor asserts the KV heads split: SRG760 quotes the assert and its frame."""
    code, diags = check(run_cli, "eagle3", "--target", CONFIGS / "Phi-4-mini-instruct.json", "--draft",
                        CONFIGS / "phi4-mini-eagle3-specforge.json", "--tp", "3", "--engine-python", py34)
    refused = [d for d in diags if d["code"] == "SRG760"]
    assert code == 1 and refused and refused[0]["severity"] == "error", ours(diags)
    assert "vLLM 0.34.0 refuses to construct the target" in refused[0]["message"]
    assert "self.total_num_kv_heads % tp_size == 0" in refused[0]["message"]
    assert refused[0]["location"].startswith("vllm/model_executor/models/llama.py:")
    assert not [d for d in diags if d["code"] == "SRG761"]  # the config layer accepted


def test_constructed_shapes_against_the_weights_headers(run_cli, py34, tmp_path):
    """A head whose fc was trained on 2 aux layers, configured for 3: the constructed fc is [64, 192], the
    checkpoint's [64, 128] (SRG762, by the checkpoint's tensor name); the fused q/k/v are compared too."""
    hidden, vocab, draft_vocab = 64, 128, 32
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": hidden,
           "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 4,
           "vocab_size": vocab, "max_position_embeddings": 256, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "torch_dtype": "float32"}
    t = {"model.embed_tokens.weight": rand([vocab, hidden], 1), "lm_head.weight": rand([vocab, hidden], 2)}
    for i in range(4):
        t[f"model.layers.{i}.self_attn.q_proj.weight"] = rand([hidden, hidden], 10 + i)
        t[f"model.layers.{i}.self_attn.k_proj.weight"] = rand([32, hidden], 20 + i)
        t[f"model.layers.{i}.self_attn.v_proj.weight"] = rand([32, hidden], 30 + i)
    write_folder(tmp_path / "target", cfg, t)
    d = {"fc.weight": rand([hidden, 2 * hidden], 40), "midlayer.self_attn.q_proj.weight": rand([hidden, 2 * hidden], 41),
         "norm.weight": rand([hidden], 42), "lm_head.weight": rand([draft_vocab, hidden], 43)}
    write_folder(tmp_path / "draft", {**cfg, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
                                      "draft_vocab_size": draft_vocab, "eagle_aux_hidden_state_layer_ids": [0, 1, 2]}, d)
    _, diags = check(run_cli, "eagle3", "--target", tmp_path / "target", "--draft", tmp_path / "draft", "--weights",
                     "--engine-python", py34)
    shapes = [d for d in diags if d["code"] == "SRG762"]
    assert len(shapes) == 1 and shapes[0]["location"] == "draft fc.weight", ours(diags)
    assert "[64, 128]" in shapes[0]["message"] and "model.fc.weight is [64, 192]" in shapes[0]["message"]
    summary = next(d for d in diags if d["code"] == "SRG765")["message"]
    assert "target 14 of 14 checkpoint tensors compared" in summary  # q + k + v per layer fused, embed, lm_head


def test_no_interpreter_is_a_coded_warning(run_cli, tmp_path):
    code, out, err = run_cli("validate", "eagle3", "--target", CONFIGS / "Llama-3.1-8B-Instruct.json", "--draft",
                             CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json", "--engine-check", "--engine-python",
                             tmp_path / "none", "--json")
    diags = json.loads(out)["diagnostics"]
    assert code == 0 and [(d["code"], d["severity"]) for d in ours(diags)] == [("SRG764", "warning")]
    assert "(no-python)" in ours(diags)[0]["message"]
