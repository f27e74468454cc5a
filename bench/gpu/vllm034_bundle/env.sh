# env.sh (vLLM 0.34 bundle): source on the H200 machine after install.sh:  . /tmp/vbundle/env.sh
# /tmp/site first on the path: vLLM 0.34.0, torch 2.14.0 (cu130), triton 3.8.0, NCCL 2.30.7 and the
# missing pure-Python deps; they shadow the image's torch 2.11 / triton. transformers is the image's 5.17.
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
# torch 2.14 links 11 NCCL symbols the image's NCCL 2.28.9 lacks (ncclCommGrow, ncclCommSuspend, ...):
# the carried 2.30.7 first (torch's own RPATH also points at ../../nvidia/nccl/lib beside it).
export LD_LIBRARY_PATH=/tmp/site/nvidia/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# flashinfer is not in the bundle; the sampler imports it on CUDA unless this is 0.
export VLLM_USE_FLASHINFER_SAMPLER=0
# no network there
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# keep NVLink multicast off (the machine's rule; also where a program builds its own environment)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
