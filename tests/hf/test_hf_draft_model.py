"""Issue 16: `surgery apply draft-model --engine hf` on a standalone pair (tiny Llamas built here,
fixed seeds): generic loading, the recipe's checks, and transformers' own assisted generation as
the decoding check (output identical to plain greedy `generate`)."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _llama(dest, seed: int, layers: int = 2, vocab: int = 300):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, bos_token_id=2,
                      eos_token_id=1, pad_token_id=0, tie_word_embeddings=False)
    LlamaForCausalLM(cfg).eval().save_pretrained(dest, safe_serialization=True)
    return dest


@pytest.fixture(scope="module")
def llamas(tmp_path_factory):
    root = tmp_path_factory.mktemp("llamas")
    target = _llama(root / "target", seed=0)
    twin = _llama(root / "twin", seed=0)  # the target's exact copy: every draft token is right
    other = _llama(root / "other", seed=1, layers=1)  # unrelated weights: drafts mostly wrong
    small_vocab = _llama(root / "small_vocab", seed=1, layers=1, vocab=280)
    return {"target": target, "twin": twin, "other": other, "small_vocab": small_vocab}


def _apply(run_cli, llamas, draft):
    return run_cli("apply", "draft-model", "--engine", "hf", "--target", llamas["target"], "--draft", llamas[draft],
                   "--prompts", "2", "--max-new-tokens", "12", "--num-draft-tokens", "3", "--device", "cpu",
                   "--json", "--no-progress")


@pytest.mark.parametrize("draft", ["twin", "other"])
def test_apply_draft_model_runs_transformers_assisted_generation(run_cli, llamas, draft):
    code, out, err = _apply(run_cli, llamas, draft)
    assert code == 0, (out, err)
    result = json.loads(out)
    assert result["verified"] and result["ok"]
    names = [c["check"] for c in result["verify"]["checks"]]
    assert {"draft model.embed_tokens is still the draft's own module",
            "draft lm_head is still the draft's own module"} <= set(names), names
    assert any("brought its own input_embeddings" in n for n in names), names  # must_exist, from the loader's record
    assert all(c["ok"] for c in result["verify"]["checks"])
    d = result["decode"]
    assert d["method"].startswith("transformers assisted generation") and d["identical"]
    assert d["tokens"] == 24 and d["drafted"] > 0
    if draft == "twin":  # the draft really proposes and the target really accepts
        assert d["acceptance_rate"] > 0.9 and d["target_forwards"] <= d["greedy_target_forwards"] // 2
    else:
        assert d["acceptance_rate"] < 0.5
    # per-draft counts from transformers' own round bookkeeping: one draft per verifying target forward
    g = d["guard"]
    # a round whose draft proposed nothing (length limit, confidence cut) is a plain step, no draft
    assert 0 < g["drafts"] <= d["target_forwards"] and g["status"] == "not judged"  # 2 x 12 tokens
    assert sum(g["per_position"]) * g["drafts"] == pytest.approx(d["accepted"], abs=0.01)


def test_draft_model_with_another_vocabulary_is_refused_by_the_recipe(run_cli, llamas):
    code, out, err = _apply(run_cli, llamas, "small_vocab")
    assert code == 1
    assert "SRG313" in out + err
