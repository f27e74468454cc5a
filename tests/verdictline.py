"""The verdict line names the vLLM release it judged ("valid for vLLM 0.34.0 (installed): ..."); tests that
read the rest of the line take the release out here, in one place."""
import re


def without_release(line: str) -> str:
    return re.sub(r"^(valid|INVALID) for vLLM \S+ \([^)]*\):", r"\1:", line)
