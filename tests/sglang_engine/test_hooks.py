"""The SGLang hook (surgery/sglang/hooks.py) at SGLang's draft-load point, on stand-in models whose
wiring methods are SGLang's own code (cut from the pinned wheel, tests/sglang_source.py): the
worker's `init_lm_head`, the models' `get_embed_and_head` / `set_embed_and_head` / `set_embed`,
the target's `set_eagle3_layers_to_capture`. SGLang itself cannot start a speculative engine on
this CPU (docs/sglang.md), so this is the hook's whole path short of SGLang's scheduler.

- the wiring after the recipe equals SGLang's own wiring, by object identity (EAGLE, MTP);
- verified, logged through SGLang's logger tree; a failed check rolls back (SRG501);
- an aux id SGLang cannot capture is refused before anything changes (SRG362);
- SGLang's own capture ids, set after the draft load, are replaced by the planned ones;
- the checkpoint names seen by the loader answer `must_exist` (sglang#27908);
- a hook with nothing to wrap is SRG361; no recipe selected: said, nothing changes."""
from __future__ import annotations

import json
import logging
import shutil
import sys
import types
from typing import List, Optional

import pytest

torch = pytest.importorskip("torch")

import sglang_source as sgl  # noqa: E402

from surgery.text.diagnostics import SurgeryError  # noqa: E402
from surgery.pairs import builtin_pair  # noqa: E402
from surgery.sglang import hooks  # noqa: E402
from surgery.sglang.log import APPLIED  # noqa: E402

PLATFORM = {"_is_xpu": False, "current_platform": types.SimpleNamespace(empty_cache=lambda: None,
                                                                         synchronize=lambda: None),
            "Optional": Optional, "List": List}


@pytest.fixture(scope="module")
def sglang_code():
    """SGLang's wiring methods, compiled from the wheel's source."""
    return {
        "get_embed_and_head": sgl.function("models/llama.py", "LlamaForCausalLM.get_embed_and_head", PLATFORM),
        "set_embed_and_head": sgl.function("models/llama.py", "LlamaForCausalLM.set_embed_and_head", PLATFORM),
        "set_embed": sgl.function("models/llama.py", "LlamaForCausalLM.set_embed", PLATFORM),
        "set_eagle3_layers_to_capture": sgl.function("models/llama.py", "LlamaForCausalLM.set_eagle3_layers_to_capture",
                                                     PLATFORM),
        "init_lm_head": sgl.function("speculative/eagle_worker_v2.py", "EagleDraftWorker.init_lm_head"),
    }


@pytest.fixture
def sglang_modules(monkeypatch, sglang_code):
    """A fake worker module holding SGLang's EagleDraftWorker.init_lm_head, and the lora import it makes."""
    for name in ("sglang", "sglang.srt", "sglang.srt.lora", "sglang.srt.speculative"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    lora = types.ModuleType("sglang.srt.lora.layers")
    lora.unwrap_lora_layer = lambda m: m
    monkeypatch.setitem(sys.modules, "sglang.srt.lora.layers", lora)
    worker_mod = types.ModuleType(POINTS[0][0])

    class EagleDraftWorker:
        init_lm_head = sglang_code["init_lm_head"]

        def _resolve_shared_embed_and_head(self):
            return self.target_worker.model_runner.model.get_embed_and_head()

    worker_mod.EagleDraftWorker = EagleDraftWorker
    monkeypatch.setitem(sys.modules, POINTS[0][0], worker_mod)
    yield worker_mod
    hooks.uninstall(POINTS)


POINTS = [("sglang.srt.speculative.stand_in_worker", "EagleDraftWorker", "init_lm_head")]


def sglang_model(sglang_code, cfg: dict, *, draft: bool):
    """A model with SGLang's Llama layout and SGLang's own wiring methods."""
    cls = type("LlamaForCausalLM" if not draft else "LlamaForCausalLMEagle", (torch.nn.Module,),
               {k: v for k, v in sglang_code.items() if k != "init_lm_head"})
    m = cls()
    m.config = types.SimpleNamespace(**cfg)
    m.pp_group = types.SimpleNamespace(is_last_rank=True)
    m.model = torch.nn.Module()
    m.model.embed_tokens = torch.nn.Embedding(cfg["vocab_size"], cfg.get("target_hidden_size", cfg["hidden_size"]))
    m.model.layers = torch.nn.ModuleList(torch.nn.Module() for _ in range(cfg["num_hidden_layers"]))
    m.model.norm = torch.nn.LayerNorm(cfg["hidden_size"])
    m.model.layers_to_capture = []
    head_rows = cfg.get("draft_vocab_size") or cfg["vocab_size"]
    m.lm_head = torch.nn.Linear(cfg["hidden_size"], head_rows, bias=False)
    m.load_lm_head_from_target = draft and not cfg.get("tie_word_embeddings") and cfg.get("draft_vocab_size") is None
    m.hot_token_id = None
    return m


def worker_for(worker_mod, algorithm, draft, target, draft_dir, target_dir):
    w = worker_mod.EagleDraftWorker()
    w.speculative_algorithm = types.SimpleNamespace(name=algorithm, is_eagle3=lambda: algorithm == "EAGLE3")
    w.hot_token_id = None
    w.draft_runner = types.SimpleNamespace(model=draft, model_config=types.SimpleNamespace(model_path=str(draft_dir)))
    w.target_worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(
        model=target, model_config=types.SimpleNamespace(model_path=str(target_dir))))
    return w


def pair_models(sglang_code, recipe):
    pair = builtin_pair(recipe)
    d_cfg = json.loads((pair.draft / "config.json").read_text())
    t_cfg = json.loads((pair.target / "config.json").read_text())
    return pair, sglang_model(sglang_code, d_cfg, draft=True), sglang_model(sglang_code, t_cfg, draft=False)


def checkpoint_names(folder) -> list[tuple[str, None]]:
    """The (name, tensor) pairs SGLang's loader would pass, names only (the hook records names)."""
    from safetensors import safe_open

    out = []
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            out += [(k, None) for k in st.keys()]
    return out


def identities(draft, target) -> dict:
    return {"embed": draft.model.embed_tokens.weight is target.model.embed_tokens.weight,
            "head": draft.lm_head.weight is target.lm_head.weight}


@pytest.mark.parametrize("recipe, algorithm", [("eagle", "EAGLE"), ("mtp", "NEXTN"), ("deepseek-mtp", "NEXTN")])
def test_the_recipe_wires_what_sglang_wires(sglang_modules, sglang_code, recipe, algorithm, caplog, monkeypatch,
                                           tmp_path):
    """Oracle by identity: SGLang's own init_lm_head alone, and the recipe alone (no SGLang
    wiring), leave the same roles on the target's tensors; through the hook, verified, logged and
    written to SURGERY_REPORT (JSON lines: the scheduler's account for the launcher)."""
    monkeypatch.delenv("SURGERY_RECIPE", raising=False)
    monkeypatch.setenv("SURGERY_REPORT", str(tmp_path / "report.jsonl"))
    pair, draft, target = pair_models(sglang_code, recipe)
    worker_for(sglang_modules, algorithm, draft, target, pair.draft, pair.target).init_lm_head()  # stock SGLang
    stock = identities(draft, target)

    from surgery.sglang.live_apply import apply_recipe

    _, draft2, target2 = pair_models(sglang_code, recipe)
    names = frozenset(n for n, _ in checkpoint_names(pair.draft))
    applied = apply_recipe(recipe, draft2, target2, str(pair.draft), str(pair.target), algorithm=algorithm,
                           loaded_names=names)
    assert applied.verification.ok and identities(draft2, target2) == stock == {"embed": True, "head": True}

    _, draft3, target3 = pair_models(sglang_code, recipe)
    hooks.install(recipe=recipe, points=POINTS)
    list(hooks.record_names(draft3, checkpoint_names(pair.draft)))  # what the loader hook records
    with caplog.at_level(logging.INFO, logger="sglang.surgery"):
        worker_for(sglang_modules, algorithm, draft3, target3, pair.draft, pair.target).init_lm_head()
    assert identities(draft3, target3) == stock
    [line] = APPLIED.find("\n".join(r.getMessage() for r in caplog.records if r.name == "sglang.surgery"))
    assert (line["recipe"], line["algorithm"], line["verification"]) == (recipe, algorithm, "PASS"), line
    assert line["sglang_wiring"] == "{'input_embeddings': 'target', 'lm_head': 'target'}", line
    assert line["difference"] == "identical", line
    from surgery.sglang.report import read

    events = read(tmp_path / "report.jsonl")
    assert [e["event"] for e in events] == ["installed", "applied"]
    assert events[1]["verified"] and events[1]["algorithm"] == algorithm
    assert events[1]["sglang_wiring"] == events[1]["after_recipe"] == {"input_embeddings": "target", "lm_head": "target"}


@pytest.mark.parametrize("release, refused", [("0.5.21", "[0, 8]"), ("0.5.23", "[8]")])
def test_an_aux_id_sglang_cannot_capture_is_refused_before_any_change(sglang_modules, sglang_code, monkeypatch,
                                                                       release, refused):
    """The built-in EAGLE-3 head reads ids [0, 7, 8] of an 8-layer target: the installed SGLang's range
    decides (0.5.21's loop has no id 0, 0.5.23's boundary captures it; no release has id 8). SRG362,
    and the capture list SGLang left stays as it was."""
    from surgery.engine import capture
    from surgery.sglang import live_apply

    monkeypatch.setattr(capture, "installed_version", lambda engine: release)
    monkeypatch.setattr(live_apply, "installed_version", lambda engine: release)
    pair, draft, target = pair_models(sglang_code, "eagle3")
    target.model.layers_to_capture = [2, 4, 5]
    hooks.install(recipe="eagle3", points=POINTS)
    with pytest.raises(SurgeryError) as exc:
        worker_for(sglang_modules, "EAGLE3", draft, target, pair.draft, pair.target).init_lm_head()
    message = exc.value.diagnostics[0].message
    assert [d.code for d in exc.value.diagnostics] == ["SRG362"] and f"ids {refused} " in message
    assert f"sglang {release} " in message and target.model.layers_to_capture == [2, 4, 5]


@pytest.fixture
def capturable_eagle3(tmp_path):
    """The built-in EAGLE-3 head's config with aux ids SGLang can capture, [1, 4, 7]."""
    pair = builtin_pair("eagle3")
    folder = tmp_path / "draft"
    shutil.copytree(pair.draft, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [1, 4, 7]
    (folder / "config.json").write_text(json.dumps(cfg))
    return pair, folder, cfg


def test_sglangs_own_capture_ids_are_replaced_by_the_planned_ones(sglang_modules, sglang_code, capturable_eagle3):
    """After the draft load SGLang sets the capture list itself (top-level ids unread: its default
    [2, 4, 5]); the runner hook puts the planned [1, 4, 7] back and checks it. With the checkpoint's
    names recorded by the loader hook, `keep lm_head must_exist` is answered (the head brought one)."""
    pair, folder, cfg = capturable_eagle3
    draft = sglang_model(sglang_code, cfg, draft=True)
    target = sglang_model(sglang_code, json.loads((pair.target / "config.json").read_text()), draft=False)
    hooks.install(recipe="eagle3", points=POINTS)
    list(hooks.record_names(draft, checkpoint_names(pair.draft)))
    worker = worker_for(sglang_modules, "EAGLE3", draft, target, folder, pair.target)
    worker.init_lm_head()
    assert target.model.layers_to_capture == [1, 4, 7]
    assert draft.model.embed_tokens.weight is target.model.embed_tokens.weight  # SGLang's set_embed
    assert draft.lm_head.weight is not target.lm_head.weight  # the reduced-vocabulary head kept
    target.set_eagle3_layers_to_capture(None)  # what configure_aux_hidden_state_capture does next
    assert target.model.layers_to_capture == [2, 4, 5]
    hooks.after_attention_backends(types.SimpleNamespace(model=target))
    assert target.model.layers_to_capture == [1, 4, 7]


def test_must_exist_without_a_record_of_loaded_names_is_not_guessed(sglang_code, capturable_eagle3):
    """No names recorded (the loader hook did not see the draft): `keep lm_head must_exist` cannot be
    told on SGLang. The step says `otherwise: skip`, so it is reported (SRG321, in the log line's
    summary), never taken as yes; with the names it is checked."""
    from surgery.sglang.live_apply import apply_recipe

    pair, folder, cfg = capturable_eagle3
    t_cfg = json.loads((pair.target / "config.json").read_text())
    draft, target = sglang_model(sglang_code, cfg, draft=True), sglang_model(sglang_code, t_cfg, draft=False)
    blind = apply_recipe("eagle3", draft, target, str(folder), str(pair.target), algorithm="EAGLE3")
    said = [d for d in blind.report.not_applicable if d.message.startswith("keep:lm_head")]
    assert [d.code for d in said] == ["SRG321"] and "cannot tell" in said[0].message
    assert "keep:lm_head" in blind.report.summary()
    draft, target = sglang_model(sglang_code, cfg, draft=True), sglang_model(sglang_code, t_cfg, draft=False)
    seen = apply_recipe("eagle3", draft, target, str(folder), str(pair.target), algorithm="EAGLE3",
                        loaded_names=frozenset(n for n, _ in checkpoint_names(pair.draft)))
    assert "keep:lm_head" in seen.report.applied and not seen.report.not_applicable and seen.verification.ok


def test_a_failed_check_rolls_the_wiring_back(sglang_modules, sglang_code, monkeypatch):
    import surgery.applier as applier
    from surgery.applier.core import VerifyReport
    from surgery.live.prepared import Check

    pair, draft, target = pair_models(sglang_code, "eagle")
    before = identities(draft, target)
    monkeypatch.setattr(applier, "verify_plan", lambda *a, **k: VerifyReport([Check("x", "forced failure", False)]))
    from surgery.sglang.live_apply import apply_recipe

    with pytest.raises(SurgeryError) as exc:
        apply_recipe("eagle", draft, target, str(pair.draft), str(pair.target), algorithm="EAGLE")
    assert [d.code for d in exc.value.diagnostics] == ["SRG501"] and "rolled back" in exc.value.diagnostics[0].message
    assert identities(draft, target) == before == {"embed": False, "head": False}


def test_a_hook_with_nothing_to_wrap_is_an_error():
    with pytest.raises(SurgeryError) as exc:
        hooks.install(recipe="eagle", points=[("sglang.srt.no_such_worker", "EagleDraftWorker", "init_lm_head"),
                                              ("os", "EagleDraftWorker", "init_lm_head")])
    assert [d.code for d in exc.value.diagnostics] == ["SRG361"]
    message = exc.value.diagnostics[0].message
    assert "sglang.srt.no_such_worker.EagleDraftWorker.init_lm_head (ModuleNotFoundError" in message
    assert "os.EagleDraftWorker.init_lm_head (not an SGLang module (never imported))" in message


def _target_runner(model, algorithm="FROZEN_KV_MTP", draft=False):
    """The attributes of SGLang's ModelRunner the gap check reads (0.5.16 / 0.5.17 / 0.5.21)."""
    return types.SimpleNamespace(model=model, is_draft_worker=draft, spec_algorithm=types.SimpleNamespace(
        name=algorithm, is_none=lambda: algorithm == "NONE"))


def test_a_speculative_worker_the_hook_does_not_cover_is_an_error(sglang_modules, sglang_code, monkeypatch, tmp_path,
                                                                  caplog):
    """No silent gaps: the recipe is selected and SGLang sets up a speculative target, but no draft
    passed a wrapped draft-load point (a worker of another class ran): SRG363 in the scheduler,
    an error line and the report's gap event with SURGERY_STRICT=0. A draft runner, a plain
    engine, and a target whose draft was applied pass."""
    monkeypatch.setenv("SURGERY_REPORT", str(tmp_path / "report.jsonl"))
    pair, draft, target = pair_models(sglang_code, "eagle")
    hooks.install(recipe="eagle", points=POINTS)
    with pytest.raises(SurgeryError) as exc:
        hooks.after_attention_backends(_target_runner(target))
    assert [d.code for d in exc.value.diagnostics] == ["SRG363"] and "FROZEN_KV_MTP" in exc.value.diagnostics[0].message
    monkeypatch.setenv("SURGERY_STRICT", "0")
    with caplog.at_level(logging.ERROR, logger="sglang.surgery"):
        hooks.after_attention_backends(_target_runner(target))
    assert any("SRG363" in r.getMessage() for r in caplog.records)
    monkeypatch.delenv("SURGERY_STRICT")
    hooks.after_attention_backends(_target_runner(draft, "EAGLE", draft=True))  # the draft's own runner
    hooks.after_attention_backends(_target_runner(target, "NONE"))  # no speculative decoding
    from surgery.sglang.report import read

    assert [e["event"] for e in read(tmp_path / "report.jsonl")] == ["installed", "gap", "gap"]
    names = frozenset(n for n, _ in checkpoint_names(pair.draft))
    list(hooks.record_names(draft, [(n, None) for n in names]))
    worker_for(sglang_modules, "EAGLE", draft, target, pair.draft, pair.target).init_lm_head()
    hooks.after_attention_backends(_target_runner(target, "EAGLE"))  # applied: no gap


def test_no_recipe_selected_is_said_and_changes_nothing(sglang_modules, sglang_code, monkeypatch, caplog):
    monkeypatch.delenv("SURGERY_RECIPE", raising=False)
    pair, draft, target = pair_models(sglang_code, "eagle3")
    with caplog.at_level(logging.INFO, logger="sglang.surgery"):
        hooks.install(points=POINTS)
    assert any("none selected (nothing changes)" in r.getMessage() for r in caplog.records)
    worker_for(sglang_modules, "EAGLE3", draft, target, pair.draft, pair.target).init_lm_head()
    assert target.model.layers_to_capture == []  # only SGLang's own set_embed ran


def test_the_environment_variable_selects_the_recipe(sglang_modules, monkeypatch):
    monkeypatch.setenv("SURGERY_RECIPE", "eagle")
    hooks.install(points=POINTS)
    from surgery.sglang.selection import selected_recipe

    assert selected_recipe() == "eagle" and selected_recipe("mtp") == "mtp"  # the launcher's argument wins


def test_the_plugin_entry_point_is_sglangs_general_plugin_group():
    """SGLang loads `sglang.srt.plugins` entry points in every process (its load_plugins, called
    from the scheduler): ours is declared there and resolves to plugin.register."""
    import tomllib

    from testpaths import ROOT

    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert eps["sglang.srt.plugins"] == {"spec_surgery": "surgery.sglang.plugin:register"}
    loader = sgl.source("plugins/__init__.py")
    assert 'GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"' in loader
    assert "load_plugins()" in sgl.source("managers/scheduler.py")


def test_the_plugin_without_sglang_says_so(monkeypatch, caplog):
    """No SGLang here: with a recipe selected, SRG361, also logged at error level (SGLang swallows
    plugin exceptions); with none selected, one info line and nothing wrapped."""
    from surgery.sglang import plugin

    monkeypatch.setenv("SURGERY_RECIPE", "eagle")
    with caplog.at_level(logging.INFO, logger="sglang.surgery"), pytest.raises(SurgeryError) as exc:
        plugin.register()
    assert [d.code for d in exc.value.diagnostics] == ["SRG361"]
    assert any(r.levelno == logging.ERROR and "SRG361" in r.getMessage() for r in caplog.records)
    monkeypatch.delenv("SURGERY_RECIPE")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sglang.surgery"):
        plugin.register()
    assert any("no recipe selected" in r.getMessage() for r in caplog.records)


def test_a_draft_head_sglang_replaces_is_kept_when_the_recipe_keeps_it(sglang_modules, sglang_code, caplog):
    """The ablation row, on SGLang's own init_lm_head: an EAGLE draft that brings its own, different
    embedding and head. SGLang replaces both (set_embed_and_head, always); the recipe
    (share_if_identical, vLLM's rule) keeps them: the hook kept the tensors aside before SGLang's
    `del` + rebind and puts them back, verified by identity with the checkpoint's tensors."""
    pair, draft, target = pair_models(sglang_code, "eagle")
    own = {"embed": draft.model.embed_tokens.weight, "head": draft.lm_head.weight}
    names = checkpoint_names(pair.draft) + [("embed_tokens.weight", None), ("lm_head.weight", None)]

    stock_draft = pair_models(sglang_code, "eagle")[1]
    worker_for(sglang_modules, "EAGLE", stock_draft, target, pair.draft, pair.target).init_lm_head()
    assert identities(stock_draft, target) == {"embed": True, "head": True}  # SGLang stock: replaced

    hooks.install(recipe="eagle", points=POINTS)
    list(hooks.record_names(draft, names))
    with caplog.at_level(logging.INFO, logger="sglang.surgery"):
        worker_for(sglang_modules, "EAGLE", draft, target, pair.draft, pair.target).init_lm_head()
    assert draft.model.embed_tokens.weight is own["embed"] and draft.lm_head.weight is own["head"]
    [line] = APPLIED.find("\n".join(r.getMessage() for r in caplog.records))
    assert line["verification"] == "PASS" and line["difference"] == "the recipe rewired input_embeddings, lm_head"
