"""bench/gpu/sglang_bundle/prune_csrc.py on a made-up flashinfer: what the norm JIT and SGLang's JIT
sources include (through any include folder, transitively) stays, with csrc's top-level headers and
nv_internal; every other csrc file goes. And abi_check.py's filter: which imported symbols are
torch's (the ones a different torch build could lack)."""
import importlib.util
import subprocess
import sys
from pathlib import Path

BUNDLE = Path(__file__).resolve().parents[2] / "bench/gpu/sglang_bundle"


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_keeps_the_include_closure_only(tmp_path):
    fi = tmp_path / "flashinfer"
    csrc = fi / "data" / "csrc"
    write(csrc / "norm.cu", '#include <flashinfer/norm.cuh>\n#include "tvm_ffi_utils.h"\n#include "norm/impl.cuh"\n')
    write(csrc / "flashinfer_norm_binding.cu", '#include "tvm_ffi_utils.h"\n')
    write(csrc / "tvm_ffi_utils.h")
    write(csrc / "other_header.cuh")                      # top-level header: kept
    write(csrc / "norm" / "impl.cuh", '#include "detail.cuh"\n')  # reached from norm.cu
    write(csrc / "norm" / "detail.cuh")                   # reached through impl.cuh's own folder
    write(csrc / "kda" / "big_kernel.cu", "x" * 1000)     # reached by nothing: removed
    write(csrc / "kda" / "helper.cuh")                    # reached by nothing: removed
    write(csrc / "moe" / "used_by_sglang.cuh")            # reached from SGLang's JIT source
    write(csrc / "nv_internal" / "include" / "x.h")       # kept whole
    write(csrc / "cake.cu")                               # a top-level source nobody compiles: removed
    write(fi / "data" / "include" / "flashinfer" / "norm.cuh", '#include "moe/unrelated.cuh"\n')
    jit = tmp_path / "jit"
    write(jit / "csrc" / "k.cuh", "#include <sgl_kernel/u.h>\n#include <cstdint>\n")
    write(jit / "include" / "sgl_kernel" / "u.h", '#include "moe/used_by_sglang.cuh"\n')  # via csrc include dir
    out = subprocess.run([sys.executable, str(BUNDLE / "prune_csrc.py"), "--flashinfer", str(fi), "--seed-dir", str(jit)],
                         capture_output=True, text=True, check=True).stdout
    left = sorted(str(p.relative_to(csrc)) for p in csrc.rglob("*") if p.is_file())
    assert left == ["flashinfer_norm_binding.cu", "moe/used_by_sglang.cuh", "norm.cu", "norm/detail.cuh",
                    "norm/impl.cuh", "nv_internal/include/x.h", "other_header.cuh", "tvm_ffi_utils.h"], out
    assert not (csrc / "kda").exists()  # emptied folders go too
    assert (fi / "data" / "include" / "flashinfer" / "norm.cuh").is_file()  # other include folders untouched
    assert "removed 3" in out


def test_missing_seed_is_an_error(tmp_path):
    (tmp_path / "flashinfer" / "data" / "csrc").mkdir(parents=True)
    proc = subprocess.run([sys.executable, str(BUNDLE / "prune_csrc.py"), "--flashinfer", str(tmp_path / "flashinfer")],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "seed missing" in proc.stderr and "norm.cu" in proc.stderr


def test_abi_check_counts_torch_symbols_only():
    spec = importlib.util.spec_from_file_location("abi_check", BUNDLE / "abi_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch_syms = ["_ZN3c104cuda9SetDeviceEa", "_ZNK2at10TensorBase8data_ptrIfEEPT_v", "_ZN5torch8autograd4NodeD2Ev",
                  "_ZTIN3c109ErrorE", "THPVariable_Wrap", "_ZN6caffe28TypeMeta3NewEv"]
    other = ["pthread_atfork", "strcat", "cudaMalloc", "_ZNSt6thread6_StateD2Ev", "_ZN12atomic_thingC1Ev", "PyModule_Create2"]
    assert [s for s in torch_syms if mod.TORCH_SYM.search(s)] == torch_syms
    assert [s for s in other if mod.TORCH_SYM.search(s)] == []
