"""vLLM integration: the general plugin, the engine context and live apply, hooks, wiring inspection, audit
and the `--engine vllm` apply command (vllm imported lazily). The per-op vLLM performers live in
surgery/ops/<kind>/vllm.py."""
