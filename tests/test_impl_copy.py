"""SRG703 per backend and per release (issue 58): the audit warns that an attention impl's copy of
`kv_sharing_target_layer_name` is stale only where the running release's impl class reads that copy,
as read from the release's wheel (surgery/data/releases/vllm.json `kv_sharing_copy`). Stub impls named
as vLLM's classes stand for the backends; no engine runs."""
from __future__ import annotations

import pytest

from surgery.engine.releases import release_data
from surgery.vllm import audit as vaudit
from surgery.vllm import impl_copy


def stub(name: str, base: type = object) -> object:
    """An impl of class `name` whose copy is stale (None), as a proposer that sets the layer's name late leaves it."""
    return type(name, (base,), {"kv_sharing_target_layer_name": None})()


def judged(impl, version: str) -> list:
    a = vaudit.Audit(None, engine_version=version)
    vaudit.stale_impl_copy(a, 0, impl, "model.layers.3.self_attn.attn", "draft.layers.0")
    return [(d.code, d.severity, d.message) for _, d in a.findings]


@pytest.mark.parametrize("cls, code, severity", [
    ("FlashInferImpl", "SRG703", "warning"),  # do_kv_cache_update: writes the KV only where the copy is None
    ("AiterFlashAttentionImpl", "SRG703", "warning"),  # forward: prefill K/V fetch
    ("HpcAttentionImpl", "SRG703", "warning"),
    ("TritonAttentionImpl", "SRG730", "info"),  # issue 58: stock 0.34 FP8 on Triton, 4 x SRG703 that were no risk
    ("FlashAttentionImpl", "SRG730", "info"),
    ("CPUAttentionBackendImpl", "SRG730", "info"),
    ("SomePlatformPluginImpl", "SRG731", "warning"),
])
def test_vllm_034_backends(cls, code, severity):
    ((got, sev, msg),) = judged(stub(cls), "0.34.0")
    assert (got, sev) == (code, severity), msg
    assert f"({cls}" in msg and "vllm 0.34.0" in msg
    if code == "SRG703":
        assert ".py:" in msg  # the release's own line that reads the copy


def test_the_same_backend_is_judged_by_each_releases_own_code():
    """CPU read the copy in 0.25 (cpu_attn.py) and stores it only by 0.34; AITER FA the other way round."""
    assert judged(stub("CPUAttentionBackendImpl"), "0.25.0")[0][0] == "SRG703"
    assert judged(stub("CPUAttentionBackendImpl"), "0.34.0")[0][0] == "SRG730"
    assert judged(stub("AiterFlashAttentionImpl"), "0.25.0")[0][0] == "SRG730"
    assert judged(stub("AiterFlashAttentionImpl"), "0.34.0")[0][0] == "SRG703"


def test_a_subclass_takes_its_nearest_known_base():
    """A platform plugin's subclass of vLLM's FlashInfer impl reads what its base reads."""
    base = type("FlashInferImpl", (), {})
    assert judged(stub("VendorFlashInferImpl", base), "0.34.0")[0][0] == "SRG703"
    assert impl_copy.copy_use(stub("X"), None)[0] == impl_copy.UNKNOWN


def test_every_release_has_the_fact_from_its_wheel():
    """Each release's data names at least one reader and one store-only class (tools/releasefacts.py
    kv_sharing_copy); FlashInfer reads the copy in every release covered."""
    for version, facts in release_data("vllm")["releases"].items():
        copy = facts["kv_sharing_copy"]
        assert copy["reads"] and copy["stores_only"], version
        assert "FlashInferImpl" in copy["reads"] and "TritonAttentionImpl" in copy["stores_only"], version
        assert not set(copy["reads"]) & set(copy["stores_only"]), version
