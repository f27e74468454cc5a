"""Whether the attention backend in use reads its impl's own copy of `kv_sharing_target_layer_name`,
from the running release's wheel-read facts (surgery/data/releases/vllm.json `kv_sharing_copy`,
tools/releasefacts.py), so the audit warns (SRG703) only where a stale copy can change what the draft
reads: vLLM 0.34's FlashInfer, ROCm AITER FA and HPC read it; Triton, FlashAttention and CPU store it
and never read it (SRG730); a class the release's data does not know is said as such (SRG731)."""
from __future__ import annotations

from ..engine.releases import release

READS, STORES_ONLY, UNKNOWN = "reads", "stores_only", "unknown"


def copy_use(impl, version: str | None) -> tuple[str, str | None, str]:
    """(verdict, where, release label) for the impl's class: READS with the `file:line` of the read,
    STORES_ONLY with the class that stores it, or UNKNOWN. The class's MRO is walked, so a plugin's
    subclass of a vLLM impl gets its base's fact (the nearest class the release names)."""
    if not version:
        return UNKNOWN, None, "no vLLM version"
    rel, _ = release("vllm", version)
    if rel is None:
        return UNKNOWN, None, f"vllm {version} (no release data)"
    facts = rel.facts.get("kv_sharing_copy") or {}
    reads, stores = facts.get("reads") or {}, set(facts.get("stores_only") or ())
    for cls in type(impl).__mro__:
        if cls.__name__ in reads:
            return READS, reads[cls.__name__], rel.label()
        if cls.__name__ in stores:
            return STORES_ONLY, cls.__name__, rel.label()
    return UNKNOWN, None, rel.label()


def running_version() -> str | None:
    try:
        from .hooks import engine_version

        return engine_version()
    except ImportError:
        return None
