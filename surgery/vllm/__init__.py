"""vLLM integration: the general plugin, the adapter and inspection helpers (vllm imported lazily)."""
