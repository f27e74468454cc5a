"""Operation kinds, one folder each (surgery/ops/<recipe key>/): the spec, its expansion from a
recipe step, plan-time checks, rendering, and one performer per engine (`hf.py`, `vllm.py`) or
the engine's declared reason why it cannot. `surgery.ops.registry` lists them; this package file
imports nothing, so importing one op's spec never pulls in the others or any engine."""
