"""The live acceptance guard's one home; engine folders keep only adapters (where the counts come from, where a trip
is said: surgery/vllm/guard.py, canary.py, statlogger.py; surgery/sglang/guard.py; surgery/hf/guard.py).

- keys.py: the rule kinds and their codes (SRG470-474), the keys of a `guard:` mapping, SRG475;
- counts.py: drafts and per-position drafted / accepted counts, what every engine feeds;
- bounds.py: the support bound (Wilson upper end) a rule trips beyond;
- expectation.py: the expectation and its source, and the rule that finds a window under it (SRG474);
- settings.py: `guard:` checked into a GuardConfig, the defaults of surgery/data/guard.yaml;
- precedence.py: the layers (defaults, pair, recipe, engine) and their one precedence (`resolve`);
- judge.py: the windows, episodes and rules (collapse, break-even, shape, drift, expectation): trips out;
- run.py: a finished run judged once (HF, SGLang and vLLM ablation rows).
A new rule: keys.py (its kind and code) and judge.py, its code in surgery/data/codes.yaml and its line in an
adapter's log; a new engine: one adapter that feeds counts.py's counts and says what judge.py returns.
"""
