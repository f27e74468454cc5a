"""The kernel below the operations: what touches live modules and knows no operation kind.

- `prepared`: what an operation's preparation returns (`Prepared`, `Check`, `NotApplicable`);
- `mutations`: reversible changes (`SetAttr`, `CopyInPlace`) and `registration()`, the one
  classifier of how a name is registered on an `nn.Module`;
- `paths`: module paths per role, read from the engine cards (surgery/data/engines/);
- `values`: the one comparator of live values (`values_equal`) and their plain-data form;
- `context`, `hf`, `vllm`: the small per-engine context an operation's performer is given (what
  one engine's live models look like: attention layers, forward context, has-own records);
- `kvrouting`: how an HF Gemma 4 assistant reads the target's K/V (the share_kv HF performer and
  the HF decoding loop both use it).

Nothing here imports an op, the applier or an engine's integration (plugin, hooks, generate);
tests/test_architecture.py holds that (surgery/data/layers.yaml).
"""
