"""`surgery probe`: settle by measured acceptance what a pair's configs cannot say (issue 57).

One job per module:
- `questions.py`: the open questions `validate` reports for the pair (SRG659, SRG640, SRG658, SRG618),
  each with the answers the field knows, as config edits;
- `candidates.py`: one candidate plan per answer, combined where the questions interact;
- `draftcopy.py`: a candidate's draft folder (a copy whose config.json says the candidate's answers);
- `stats.py`: per-prompt acceptance, the ranking, the margin and its noise (paired bootstrap and sign
  test over the prompts), the early stop bound;
- `measure.py`: the per-prompt loop (early stop) every engine's measurer shares;
- `measure_hf.py` / `measure_vllm.py`: one candidate on a live pair, prompt by prompt (the engine's part);
- `runner.py`: the loop over candidates (early stop, forward counts);
- `write.py`: the config patch with its provenance and the measured expectation for the guard.
"""
