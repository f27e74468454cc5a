# env.sh: source on the H200 machine after install.sh:  . /tmp/sbundle/env.sh
# /tmp/ssite first on the path: SGLang + sgl_kernel + flashinfer + the deps of deps.txt, including
# transformers 5.12.1 / tokenizers 0.22.2, which shadow the image's 5.17.0 / 0.23.2 there. SGLang's
# scheduler and detokenizer are spawned processes: they inherit this environment.
export PYTHONPATH=${SITE:-/tmp/ssite}${PYTHONPATH:+:$PYTHONPATH}
# flashinfer is bundled only because sglang/srt/layers/sampler.py imports flashinfer.sampling on CUDA;
# it has no JIT sources here. This makes sglang's is_flashinfer_available() false, so no code path
# that checks it (rope, norms, allreduce fusion, flashinfer backends) picks a flashinfer kernel.
export SGLANG_IS_FLASHINFER_AVAILABLE=false
# DeepGEMM is not bundled (sglang turns it off when `import deep_gemm` fails; this says so too)
export SGLANG_ENABLE_JIT_DEEPGEMM=0
# no network there: no hub look-ups (pass local folders and skip_tokenizer_init=True), no telemetry
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 DO_NOT_TRACK=1
export SGLANG_USE_MODELSCOPE=false
