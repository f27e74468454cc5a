"""SGLang integration: the recipe applied at SGLang's draft-load point (hooks.py -> live_apply.py),
SGLang's own wiring as rules (rules.py, checked against its code), recipe selection (selection.py),
logging through SGLang's logger (log.py), `surgery apply --engine sglang` (surgery/commands/sglang_apply.py) and
the plan-level comparison with vLLM's wiring (compare.py). SGLang is imported lazily, inside
functions, and only here: surgery imports and tests run without it. docs/sglang.md."""
