"""The live acceptance guard's one home: the judging (windows, bounds, trips), its settings and their
precedence, the expectation and its source, and the judging of a finished run (`run`). Engine folders
(surgery/vllm, surgery/hf, surgery/sglang) keep only adapters: where counts come from, where a trip is
said."""
