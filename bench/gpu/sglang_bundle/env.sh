# env.sh: source on the H200 machine after install.sh:  . /tmp/sbundle/env.sh
# /tmp/ssite first on the path: SGLang + sgl_kernel + flashinfer + the deps of deps.txt, including
# transformers 5.12.1 / tokenizers 0.22.2, which shadow the image's 5.17.0 / 0.23.2 there. SGLang's
# scheduler and detokenizer are spawned processes: they inherit this environment.
export PYTHONPATH=${SITE:-/tmp/ssite}${PYTHONPATH:+:$PYTHONPATH}
# flashinfer comes with its JIT sources: sgl_kernel.rmsnorm hands bf16 / fp16 to flashinfer.norm and
# SGLang's own JIT kernels (rope, ...) include flashinfer's headers; each compiles with the image's
# nvcc on first use. This makes sglang's is_flashinfer_available() false, so the code paths that
# check it (allreduce fusion, the flashinfer attention / sampling backends) stay off: fewer compiles.
export SGLANG_IS_FLASHINFER_AVAILABLE=false
# JIT builds (tvm_ffi for SGLang's kernels, flashinfer's workspace) under /tmp: later engine processes
# of the same call, and the next call while the machine stays warm, load them instead of compiling
export TVM_FFI_CACHE_DIR=${TVM_FFI_CACHE_DIR:-/tmp/sjit/tvm-ffi} FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/sjit}
[ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ] && export CUDA_HOME=/usr/local/cuda
# DeepGEMM is not bundled (sglang turns it off when `import deep_gemm` fails; this says so too)
export SGLANG_ENABLE_JIT_DEEPGEMM=0
# no network there: no hub look-ups (pass local folders and skip_tokenizer_init=True), no telemetry
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 DO_NOT_TRACK=1
export SGLANG_USE_MODELSCOPE=false
