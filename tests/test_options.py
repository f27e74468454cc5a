"""surgery/options.py: the CLI builds each command's options once from argparse's namespace (issue 43)."""
from __future__ import annotations

import dataclasses

import pytest

from surgery.cli import build_parser
from surgery.options import ApplyOptions, AuditOptions, CheckOptions, fields_from


def test_check_options_take_every_check_flag_and_default_what_the_parser_lacks():
    args = build_parser().parse_args(["releases", "eagle3", "--draft", "D", "--method", "eagle3", "--max-model-len",
                                      "4096", "--calculate-kv-scales", "--hf-overrides", '{"a": 1}'])
    o = fields_from(CheckOptions, args, target="T", target_from_verifier=True, engine_version="0.11.0")
    assert (o.method, o.method_given, o.max_model_len, o.calculate_kv_scales, o.hf_overrides) == \
        ("eagle3", True, 4096, True, {"a": 1})
    assert (o.target, o.target_from_verifier, o.engine_version, o.draft) == ("T", True, "0.11.0", "D")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.method = "mtp"  # type: ignore[misc]


def test_apply_and_audit_options_from_their_parsers():
    args = build_parser().parse_args(["apply", "gemma4-mtp", "--no-strict", "--threads", "2"])
    o = fields_from(ApplyOptions, args, strict=not args.no_strict, progress=not args.no_progress)
    assert (o.recipe, o.engine, o.strict, o.progress, o.threads, o.num_draft_tokens) == \
        ("gemma4-mtp", "hf", False, True, 2, None)
    args = build_parser().parse_args(["audit", "eagle3", "--target", "T", "--draft", "D", "--engine-arg", "x=1"])
    a = fields_from(AuditOptions, args, engine_arg=tuple(args.engine_arg))
    assert (a.engine_arg, a.max_model_len, a.num_speculative_tokens) == (("x=1",), 512, 2)


def test_a_required_option_the_parser_lacks_is_a_programming_error():
    with pytest.raises(TypeError, match="AuditOptions.target"):
        fields_from(AuditOptions, build_parser().parse_args(["explain"]), recipe="r", draft="d")


def test_the_plugin_builds_the_same_options_from_the_engine_config():
    """surgery audit / the plugin: the options come from vLLM's own config, not from flags."""
    from types import SimpleNamespace

    from surgery.vllm.audit_config import engine_check_options

    proposer = SimpleNamespace(
        speculative_config=SimpleNamespace(method="eagle3", num_speculative_tokens=3, kv_cache_dtype="fp8"),
        vllm_config=SimpleNamespace(model_config=SimpleNamespace(max_model_len=2048, hf_overrides={"a": 1})))
    o = engine_check_options(proposer)
    assert o == CheckOptions(engine="vllm", method="eagle3", max_model_len=2048, hf_overrides={"a": 1},
                             num_speculative_tokens=3, draft_kv_cache_dtype="fp8")
    proposer.vllm_config.model_config.hf_overrides = lambda c: c  # a callable override is not a dict: not read
    assert engine_check_options(proposer).hf_overrides is None
