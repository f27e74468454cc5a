"""SRG680, the last slot (TorchSpec#87): vLLM's id L is pre-norm, transformers' hidden_states[L] is
post-norm. Both facts are checked against the engines' own code, then the finding per producer."""
from __future__ import annotations

import inspect
import json

import pytest

from testpaths import CONFIGS

LLAMA = CONFIGS / "Llama-3.1-8B-Instruct.json"  # 32 layers
EAGLE3 = CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json"


def test_transformers_last_hidden_state_is_post_norm():
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    model = LlamaModel(cfg).eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 2.0)  # a norm that is not the identity at init
        out = model(torch.arange(8)[None], output_hidden_states=True)
    last = out.hidden_states[cfg.num_hidden_layers]
    assert torch.equal(last, out.last_hidden_state)  # entry L is the final norm's output
    from surgery.checks.inherit import engine_rules

    assert engine_rules()["last_slot"]["hf"] == "post_norm"


def test_vllm_captures_id_L_before_the_final_norm():
    pytest.importorskip("vllm")
    from vllm.model_executor.models.llama import LlamaModel

    src = inspect.getsource(LlamaModel.forward)
    capture = src.index("aux_hidden_states, idx + 1")  # after layer idx: id idx + 1, hidden + residual
    assert capture < src.index("self.norm(hidden_states, residual)")
    from surgery.checks.inherit import engine_rules

    assert engine_rules()["last_slot"]["vllm"] == "pre_norm"


def _plan(run_cli, tmp_path, ids, *extra):
    cfg = json.loads(EAGLE3.read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = ids
    p = tmp_path / "head.json"
    p.write_text(json.dumps(cfg))
    rc, out, _ = run_cli("plan", "eagle3", "--target", LLAMA, "--draft", p, "--json", *extra)
    assert rc in (0, 1), out  # 1: a convention mismatch of the written ids (SRG656), another check
    return [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG680"]


@pytest.mark.parametrize("producer", ["eagle", "modelopt", "specforge"])
def test_head_trained_on_transformers_states_warns(run_cli, tmp_path, producer):
    """Slot L read by the engine, or learned by the head: SpecForge / ModelOpt ids are layer outputs,
    so a written L-1 is the head's slot L (transformers' post-norm entry)."""
    from surgery.formats.conventions import to_vllm

    written = [i for i in range(33) if 32 in to_vllm([2, 16, i], producer)][-1]
    (d,) = _plan(run_cli, tmp_path, [2, 16, written], "--producer", producer)
    assert d["severity"] == "warning" and "before the final norm" in d["message"] and producer in d["message"]


@pytest.mark.parametrize("producer", ["speculators", "vllm"])
def test_head_trained_on_vllm_captures_is_silent(run_cli, tmp_path, producer):
    assert _plan(run_cli, tmp_path, [2, 16, 32], "--producer", producer) == []


def test_unknown_producer_is_said_not_passed(run_cli, tmp_path):
    (d,) = _plan(run_cli, tmp_path, [2, 16, 32])
    assert d["severity"] == "info" and "--producer" in d["message"]


def test_ids_below_L_are_silent(run_cli, tmp_path):
    assert _plan(run_cli, tmp_path, [2, 16, 30], "--producer", "specforge") == []
    assert _plan(run_cli, tmp_path, [2, 16, 31]) == []


def test_explain_cites_torchspec(run_cli):
    rc, out, _ = run_cli("explain", "SRG680")
    assert rc == 0 and "TorchSpec#87" in out
