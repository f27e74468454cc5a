# env.sh: source on the GPU machine after install.sh:  . /tmp/sbundle/env.sh
# /tmp/ssite first on the path: SGLang + sgl_kernel + flashinfer + the deps of deps.txt, including
# the release's transformers (0.5.23: 5.19.0; 0.5.17: 5.12.1 + tokenizers 0.22.2), which shadow the
# image's 5.17.0. SGLang's scheduler and detokenizer are spawned processes: they inherit this environment.
#
# Where torch comes from: TORCH_SITE (written by make_bundle.sh into p1). Empty: the image's torch
# 2.11.0 (0.5.16 / 0.5.17). Else (0.5.23: /tmp/site) the vLLM 0.34 bundle's torch 2.14.0, triton
# 3.8.0, NCCL 2.30.7 and torchvision 0.29.0, unpacked there by that bundle's install.sh. Only those
# come onto the path, through a folder of links (/tmp/storch): the rest of /tmp/site (vLLM 0.34 and
# its own pins of openai, xgrammar, compressed-tensors, ...) stays off it, so SGLang's optional
# `import vllm` paths (logger silencing, parallel-state patching) are not taken.
SB=${SB:-/tmp/sbundle}
TSITE=$(cat "$SB/TORCH_SITE" 2>/dev/null || true)
if [ -n "$TSITE" ]; then
  STORCH=${STORCH:-/tmp/storch}
  mkdir -p "$STORCH"
  for e in "$TSITE"/*; do
    case "${e##*/}" in
      torch|torchgen|functorch|triton|nvidia|torchvision|torchvision.libs|torch-*.dist-info|triton-*.dist-info|\
      torchvision-*.dist-info|nvidia_nccl*.dist-info) ln -sfn "$e" "$STORCH/${e##*/}" ;;
    esac
  done
  export PYTHONPATH=$STORCH${PYTHONPATH:+:$PYTHONPATH}
  # torch 2.14 links NCCL symbols the image's NCCL 2.28.9 lacks: the carried 2.30.7 first (as
  # ../vllm034_bundle/env.sh does)
  export LD_LIBRARY_PATH=$TSITE/nvidia/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
fi
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
