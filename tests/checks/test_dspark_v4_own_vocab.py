"""SRG809 (issue 68, the fourth catalogue's last report): sgl-project/SpecForge#800, a DSpark DeepSeek-V4
drafter whose files carry its own embedding / head under mtp.* (`mtp.0.embed.weight`, `mtp.2.head.weight`;
the official drafter's differ from the target's, max abs diff 3.71 / 4.44). Judged from the draft's
safetensors header (`validate --weights`) against what each release's DSparkDeepseekV4ForCausalLM does with
such tensors per platform: surgery/data/catalogue4.yaml `dspark_v4_own_vocab`, every row of which
`test_the_rows_are_the_wheels` derives again from the wheel (.cache/wheels/vllm) where it is on disk.

The config: no verbatim copy of deepseek-ai/DeepSeek-V4-Flash-DSpark's config.json is in any public
repository this project can read, so tests/data/catalogue4/DeepSeek-V4-Flash-DSpark.config.json is the
project's reconstructed DeepSeek-V4 config (tests/data/configs/deepseek_v4/DeepSeek-V4.json) with the DSpark
fields as public code quotes them from the published file (its `_source` says where); they are the keys the
wheels' DSpark class reads. The drafter ships in the target's checkpoint (one folder is both --target and
--draft, as DeepSeek publishes it), with a tiny header: the names are what the check reads, not the sizes.
"""
from __future__ import annotations

import ast
import json
import re
import textwrap
import zipfile
from pathlib import Path

import pytest

import tiny_checkpoints as tc
from testpaths import ROOT, VLLM_WHEELS_WHERE, vllm_wheels

C4 = ROOT / "tests" / "data" / "catalogue4"
DSPARK_V4 = C4 / "DeepSeek-V4-Flash-DSpark.config.json"
HIDDEN, VOCAB = 4, 8


def config(**changes) -> dict:
    cfg = {k: v for k, v in json.loads(DSPARK_V4.read_text()).items() if not k.startswith("_")}
    cfg.update(changes)
    return cfg


def tensors(own: str | None = "random") -> dict:
    """The target's pair and a few DSpark stage tensors (V4.1's Markov factors are named markov_head.embed /
    markov_head.head: not a stage's own pair); with `own`, the stages' own embed / head: "random" values, or
    "target" (the target's bytes)."""
    t = {"embed.weight": tc.rand([VOCAB, HIDDEN], 1), "head.weight": tc.rand([VOCAB, HIDDEN], 2),
         "layers.0.attn.wkv.weight": tc.rand([HIDDEN, HIDDEN], 3),
         "mtp.0.main_proj.weight": tc.rand([HIDDEN, 3 * HIDDEN], 4), "mtp.0.main_norm.weight": tc.rand([HIDDEN], 5),
         "mtp.1.attn.wkv.weight": tc.rand([HIDDEN, HIDDEN], 6),
         "mtp.2.markov_head.embed.weight": tc.rand([VOCAB, 2], 7),
         "mtp.2.markov_head.head.weight": tc.rand([VOCAB, 2], 8)}
    if own == "random":
        t["mtp.0.embed.weight"] = tc.rand([VOCAB, HIDDEN], 11)
        t["mtp.2.head.weight"] = tc.rand([VOCAB, HIDDEN], 12)
    elif own == "target":
        t["mtp.0.embed.weight"] = tc.rand([VOCAB, HIDDEN], 1)
        t["mtp.2.head.weight"] = tc.rand([VOCAB, HIDDEN], 2)
    return t


def checkpoint(tmp_path, own: str | None = "random", **changes) -> Path:
    return tc.write_folder(tmp_path / f"dspark-v4-{own}", config(**changes), tensors(own))


def srg809(run_cli, folder, *args, recipe="dspark") -> tuple[int, list[dict]]:
    rc, out, err = run_cli("validate", recipe, "--target", folder, "--draft", folder, "--method", "dspark",
                           "--json", *args)
    assert out.strip(), err
    return rc, [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG809"]


def row(release: str, platform: str, package: str = "deepseek_v4") -> dict:
    from surgery.checks.catalogue4 import data

    return data()["dspark_v4_own_vocab"]["releases"][release][package][platform]


# ------------------------------------------------------------------ CUDA / ROCm: the loader's KeyError

@pytest.mark.parametrize("release", ["0.25.0", "0.30.0", "0.34.0"])
def test_own_embed_and_head_are_the_loaders_keyerror_on_cuda(run_cli, tmp_path, release):
    _, found = srg809(run_cli, checkpoint(tmp_path), "--weights", "--engine-version", release)
    assert len(found) == 1 and found[0]["severity"] == "error", found
    msg, r = found[0]["message"], row(release, "cuda")
    assert "SpecForge#800" in msg and "KeyError" in msg and f"vLLM {release} on CUDA" in msg
    assert "mtp.0.embed.weight -> model.layers.0.embed.weight" in msg and "mtp.2.head.weight -> model.layers.2.head.weight" in msg
    assert f"{r['file']}:{r['lookup']}" in msg and f"{r['file']}:{r['remap']}" in msg
    assert "markov_head" not in msg  # V4.1's Markov factors are not a stage's own pair
    assert found[0]["hint"].startswith("drop the mtp.* embed / head tensors")
    assert "mtp.0.embed.weight" in found[0]["location"]


def test_without_the_own_pair_or_without_weights_nothing_is_said(run_cli, tmp_path):
    """The branch points: the same checkpoint without the stages' own pair, and the pair without --weights
    (a config says nothing of it)."""
    _, found = srg809(run_cli, checkpoint(tmp_path, own=None), "--weights", "--engine-version", "0.34.0")
    assert not found
    _, found = srg809(run_cli, checkpoint(tmp_path), "--engine-version", "0.34.0")
    assert not found


def test_rocm_raises_from_0_26_and_0_25_has_no_rocm_class(run_cli, tmp_path):
    folder = checkpoint(tmp_path)
    _, found = srg809(run_cli, folder, "--weights", "--engine-version", "0.34.0", "--device", "rocm")
    assert len(found) == 1 and found[0]["severity"] == "error", found
    assert "on ROCm" in found[0]["message"] and row("0.34.0", "rocm")["file"] in found[0]["message"]
    _, found = srg809(run_cli, folder, "--weights", "--engine-version", "0.25.0", "--device", "rocm")
    assert not found and row("0.25.0", "rocm")["loads"] == "absent"


def test_deepseek_v41_is_judged_by_its_own_package(run_cli, tmp_path):
    """V4.1's drafter class (models/deepseek_v41, 0.30+) raises the same way; before 0.30 no release has it."""
    folder = checkpoint(tmp_path, model_type="deepseek_v41")
    _, found = srg809(run_cli, folder, "--weights", "--engine-version", "0.34.0")
    assert len(found) == 1 and found[0]["severity"] == "error", found
    assert row("0.34.0", "cuda", "deepseek_v41")["file"] in found[0]["message"]
    _, found = srg809(run_cli, folder, "--weights", "--engine-version", "0.29.0")
    assert not found


# ------------------------------------------------------------ XPU: loaded, the own pair ignored

def test_xpu_ignores_them_a_warning_when_they_differ_from_the_targets(run_cli, tmp_path):
    _, found = srg809(run_cli, checkpoint(tmp_path), "--weights", "--engine-version", "0.34.0", "--device", "xpu")
    assert len(found) == 1 and found[0]["severity"] == "warning", found
    msg = found[0]["message"]
    assert "on XPU loads the drafter" in msg and "SpecForge#800" in msg and "KeyError" not in msg
    assert "mtp.0.embed.weight vs the target's embed.weight" in msg and "mtp.2.head.weight vs the target's head.weight" in msg
    assert f"{row('0.34.0', 'xpu')['file']}:{row('0.34.0', 'xpu')['lookup']}" in msg
    # the branch point: the same names holding the target's bytes lose nothing
    _, found = srg809(run_cli, checkpoint(tmp_path, own="target"), "--weights", "--engine-version", "0.34.0",
                      "--device", "xpu")
    assert len(found) == 1 and found[0]["severity"] == "info" and "equal the target's" in found[0]["message"], found


# ------------------------------------------------------------ which drafts, which releases

def test_only_a_dspark_drafter_is_judged(run_cli, tmp_path):
    """Served with method mtp the checkpoint goes to another class (DeepSeekV4MTP): not this check's."""
    folder = checkpoint(tmp_path)
    _, out, err = run_cli("validate", "dspark", "--target", folder, "--draft", folder, "--method", "mtp",
                           "--weights", "--engine-version", "0.34.0", "--json")
    assert out.strip(), err
    assert not [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG809"]


def test_a_release_no_row_was_read_for_is_a_note(run_cli, tmp_path):
    _, found = srg809(run_cli, checkpoint(tmp_path), "--weights", "--engine-version", "0.24.0")
    assert len(found) == 1 and found[0]["severity"] == "info", found
    assert "what vLLM 0.24.0 does was not read here" in found[0]["message"]
    assert "(0.25.0-0.34.0) raises KeyError" in found[0]["message"]


# ------------------------------------------------------------ the rows against the wheels

CLASS = "DSparkDeepseekV4ForCausalLM"
PLATFORM_BRANCH = {"is_rocm": "rocm", "is_xpu": "xpu", "is_cpu": "cpu"}  # the else branch: cuda


def _dispatch(init_src: str, package: str) -> dict[str, tuple[str | None, int]]:
    """platform -> (the module models/<package>/__init__.py imports the class from, None where it sets the class
    to None; the line): a platform without a branch of its own takes the else branch."""
    node = next(n for n in ast.parse(init_src).body if isinstance(n, ast.If))
    branches = []
    while True:
        branches.append((PLATFORM_BRANCH.get(node.test.func.attr) if isinstance(node.test, ast.Call) else None,
                         node.body))
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
            continue
        branches.append(("cuda", node.orelse))
        break
    found = {}
    for platform, body in branches:
        for stmt in body:
            if isinstance(stmt, ast.ImportFrom) and any(a.name == CLASS for a in stmt.names):
                found[platform] = (f"models/{package}/{stmt.module.lstrip('.').replace('.', '/')}.py", stmt.lineno)
            elif isinstance(stmt, ast.Assign) and any(getattr(t, "id", None) == CLASS for t in stmt.targets):
                found[platform] = (None, stmt.lineno)
    return {p: found.get(p, found["cuda"]) for p in ("cuda", "rocm", "xpu", "cpu")}


def _method(tree: ast.Module, name: str):
    cls = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == CLASS), None)
    return next((m for m in (cls.body if cls else []) if isinstance(m, ast.FunctionDef) and m.name == name), None)


class _Stub:
    pass


def _remapped(src: str, fn: ast.FunctionDef, name: str) -> str | None:
    """The release's own `_remap_dspark_name` run on a checkpoint name (string code only: `re`)."""
    ns = {"re": re}
    exec(textwrap.dedent("\n".join(src.splitlines()[fn.lineno - 1:fn.end_lineno])), ns)  # noqa: S102
    self = _Stub()
    self.model = _Stub()
    self.model.confidence_head = object()
    return ns[fn.name](self, name)


def _variant(src: str) -> tuple[dict, dict]:
    """(the row, {probe name: the name the release's remap makes of it})."""
    tree = ast.parse(src)
    lines = src.splitlines()
    load = _method(tree, "load_weights")
    if load is None:  # the CPU stub: __init__ raises before any weight
        init = _method(tree, "__init__")
        assert any(isinstance(n, ast.Raise) for n in ast.walk(init))
        return {"loads": "refused", "at": f"{init.lineno}-{init.end_lineno}"}, {}
    remap = _method(tree, "_remap_dspark_name")
    body = lines[load.lineno - 1:load.end_lineno]
    guarded = any("if name not in params_dict" in line for line in body)
    lookup = max(i for i, line in enumerate(body) if line.strip() == "param = params_dict[name]") + load.lineno
    flags = [i + 1 for i, line in enumerate(lines) if re.match(r"\s+has_own_(embed_tokens|lm_head) = False\s*$", line)]
    assert len(flags) == 2, flags
    probes = {n: _remapped(src, remap, n) for n in ("mtp.0.embed.weight", "mtp.0.emb.tok_emb.weight",
                                                     "mtp.2.head.weight", "mtp.2.markov_head.head.weight")}
    return {"loads": "skips" if guarded else "raises", "file": None, "remap": f"{remap.lineno}-{remap.end_lineno}",
            "lookup": lookup, "aliases": f"{flags[0]}-{flags[1]}"}, probes


def wheel_rows(wheel: Path) -> tuple[dict, dict]:
    """({package: {platform: row}} as catalogue4.yaml writes them, {module: remapped probes})."""
    z = zipfile.ZipFile(wheel)
    names = set(z.namelist())
    rows, probes = {}, {}
    for package in ("deepseek_v4", "deepseek_v41"):
        init = f"vllm/models/{package}/__init__.py"
        if init not in names:
            continue
        rows[package] = {}
        for platform, (module, line) in _dispatch(z.read(init).decode(), package).items():
            where = f"models/{package}/__init__.py:{line}"
            if module is None:
                rows[package][platform] = {"loads": "absent", "dispatch": where}
                continue
            src = z.read("vllm/" + module).decode()
            r, probes[module] = _variant(src)
            rows[package][platform] = {**{k: v for k, v in r.items() if v is not None}, "file": module, "dispatch": where}
            # the names the remap makes are registered by nothing: the decoder layer (and the drafter) hold no
            # embed / emb / head attribute
            for mod in (module, module.rsplit("/", 1)[0] + "/model.py"):
                text = z.read("vllm/" + mod).decode() if "vllm/" + mod in names else ""
                assert not re.search(r"self\.(embed|emb|head)\s*=", text), (wheel.name, mod)
    return rows, probes


@pytest.mark.parametrize("release", ["0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0",
                                     "0.31.0", "0.32.0", "0.33.0", "0.34.0"])
def test_the_rows_are_the_wheels(release):
    """Each release's row, derived again from its wheel: which module each platform's branch imports, whether
    load_weights guards the lookup, where, and what the release's own `_remap_dspark_name` makes of the names
    (maps_to; V4.1's markov_head.head is a head-stack name, mapped elsewhere)."""
    from surgery.checks.catalogue4 import data

    found = vllm_wheels(release)
    if not found:
        pytest.skip(f"no vLLM {release} wheel in .cache/wheels/vllm (tools/gen_engine_releases.py fetches it) or .cache/oracles/wheels")
    rule = data()["dspark_v4_own_vocab"]
    rows, probes = wheel_rows(found[0])
    assert rows == rule["releases"][release]
    for module, made in probes.items():
        if not made:
            continue  # the CPU stub: no loader
        for name in ("mtp.0.embed.weight", "mtp.0.emb.tok_emb.weight", "mtp.2.head.weight"):
            stage, rest = name.split(".", 2)[1:]
            assert made[name] == rule["maps_to"].format(stage=stage, rest=rest), (release, module, name)
        assert not made["mtp.2.markov_head.head.weight"].startswith("model.layers."), (release, module)
