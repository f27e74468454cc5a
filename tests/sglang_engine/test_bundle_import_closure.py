"""bench/gpu/sglang_bundle/import_closure.py on a made-up site: each kind of import is classed as the
bundle's README says (needed / guarded / optional / lazy; other platforms' guards skipped)."""
import subprocess
import sys
import textwrap
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "bench/gpu/sglang_bundle/import_closure.py"


def test_kinds(tmp_path):
    pkg = tmp_path / "site" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from sglang import mod\n")
    (pkg / "mod.py").write_text(textwrap.dedent("""
        import os, yaml
        import needed_pkg
        from cuda.tile import x
        from . import sub
        if is_flashinfer_available():
            import guarded_pkg
        if _is_cuda:
            import cuda_pkg
        if _is_hip:
            import hip_pkg
        try:
            import optional_pkg
        except ImportError:
            pass
        def f():
            import lazy_pkg
    """))
    (pkg / "sub.py").write_text("import sub_needed\n")
    (pkg / "other.py").write_text("import only_in_unreached\n")
    image = tmp_path / "image.txt"
    image.write_text("pyyaml\ncuda-bindings\n")
    out = subprocess.run([sys.executable, str(TOOL), "--site", str(tmp_path / "site"), "--image", str(image),
                          "--entry", "sglang", "--lazy"], capture_output=True, text=True, check=True).stdout
    sections = {}
    for line in out.splitlines():
        if line.startswith("  ") and not line.startswith("    "):
            cur = line.split()[0]
            sections[cur] = set()
        elif line.startswith("    "):
            sections[cur].add(line.split()[0])
    assert sections["NEEDED"] == {"needed_pkg", "cuda.tile", "cuda_pkg", "sub_needed"}
    assert sections["guarded"] == {"guarded_pkg"}
    assert sections["optional"] == {"optional_pkg"}
    assert sections["lazy"] == {"lazy_pkg"}
    assert "hip_pkg" not in out and "only_in_unreached" not in out and "yaml" not in out
