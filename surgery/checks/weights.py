"""Weights checks: what the configs cannot say, read from the safetensors headers of both folders.

`check_weights(plan, recipe, draft, target, draft_dir, target_dir)` returns a `WeightsReport`: coded
findings (SRG6xx, each located at file + tensor name, with a hint) and the list of bounded data reads
it made. Headers only, unless a header cannot decide (the d2t convention, whether the draft's own
embedding / lm_head equals the target's): then a bounded slice is decoded in pure Python and the
report says so (`data_reads`). Never imports torch or numpy.

Each check guards against a public report (docs/audit.md lists them):
- the draft's own embed_tokens / lm_head: `if_draft_has_own` decided on paper (vllm#28549,
  sglang#27908 head without lm_head, TorchSpec#38 random embed_tokens kept);
- d2t / t2d present and shaped as draft_vocab_size says, d2t holding offsets (NVIDIA-NeMo/Automodel#2447,
  verl-SpeCo#67);
- the EAGLE-3 fc input width = number of aux layers x target hidden size (vllm#50170);
- MTP layer weights under the indices the plan maps;
- calibrated target KV scales on an FP8 cache that shared draft layers would read with 1.0 (vllm#49262,
  #41789, #56539);
- tensors vLLM needs in KV-shared draft layers, and the target K/V producers they read.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ..text.diagnostics import ERROR, Diagnostic, Location, SurgeryError, diag
from .safetensors_header import Checkpoint, TensorInfo, read_checkpoint, read_raw, read_values
from .catalogue3 import dflash2_check, is_dflash2  # the field's third catalogue (issue 45)
from .mtp_quant import mtp_quant_check
from .dspark_layout import is_v4_drafter  # DeepSeek-V4's own DSpark drafter (main_proj, not fc)
from ..modelfiles.sidebyside import any_remote, side_by_side
from ..engine import servedarch
from ..facts.modelref import open_model
from ..modelfiles.source import LocalSource
from ..resources import load_data

# DeepSeek-V4's DSpark drafter: the input projection its loader reads (check_v4_main_proj), and the packed dtypes
# whose last dimension is not the input count
_V4_MAIN_PROJ = re.compile(r"^mtp\.\d+\.main_proj\.weight$")
_PACKED = ("U8", "I8", "F4", "F8_E8M0")
D2T_READ_LIMIT = 1 << 16  # elements; a 32k draft vocabulary is read whole
EQUAL_READ_BYTES = 1 << 16  # bytes compared at the start and the end of two tensors


@lru_cache(maxsize=1)
def layout() -> dict:
    with open(Path(__file__).resolve().parent.parent / "data" / "weights_layout.yaml", encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@dataclass
class WeightsReport:
    draft_folder: str
    target_folder: str
    draft_tensors: int
    target_tensors: int
    findings: list[Diagnostic] = field(default_factory=list)
    data_reads: list[str] = field(default_factory=list)  # what was decoded beyond the headers, and why
    decisions: dict[str, str] = field(default_factory=dict)  # role -> what load time will do
    own: dict[str, str] = field(default_factory=dict)  # role -> absent | identical | differs | unknown
    superseded: set[str] = field(default_factory=set)  # plan codes the weights answer (SRG207: see `findings`)

    @property
    def ok(self) -> bool:
        return not any(d.severity == ERROR for d in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "draft": {"folder": self.draft_folder, "tensors": self.draft_tensors},
                "target": {"folder": self.target_folder, "tensors": self.target_tensors},
                "headers_only": not self.data_reads, "data_reads": list(self.data_reads),
                "decisions": dict(self.decisions), "own": dict(self.own), "findings": [d.to_dict() for d in self.findings]}


def _loc(t: TensorInfo | None, ckpt: Checkpoint, name: str) -> Location:
    return Location(t.file if t is not None else ckpt.folder, key_path=name)


def _folder(path: str | os.PathLike) -> Path:
    p = Path(path)
    return p.parent if p.suffix == ".json" and p.is_file() else p


class _Checker:
    def __init__(self, plan, recipe, draft, target, dckpt: Checkpoint, tckpt: Checkpoint, read_data: bool):
        self.plan, self.recipe, self.draft, self.target = plan, recipe, draft, target
        self.d, self.t = dckpt, tckpt
        self.read_data = read_data
        self.report = WeightsReport(dckpt.folder, tckpt.folder, len(dckpt.tensors), len(tckpt.tensors))
        self.lay = layout()

    def add(self, code: str, message: str, location: Location, hint: str | None = None,
            severity: str | None = None) -> None:
        self.report.findings.append(diag(code, message, location, hint, severity))

    def run(self) -> WeightsReport:
        self.check_plain_eagle3_head()
        self.check_roles()
        if self.plan.ops("capture_hidden_states"):
            self.check_eagle3()
        self.check_draft_layer_sets()
        self.check_kv_scales()
        self.check_kv_shared_layers()
        self.report.findings += weights_catalogue3(self.draft, self.target, self.d, self.t)
        return self.report

    # -- embed_tokens / lm_head ------------------------------------------------------------------
    def role_tensor(self, ckpt: Checkpoint, role: str) -> TensorInfo | None:
        return ckpt.first(self.lay["roles"][role])

    def check_roles(self) -> None:
        for role in ("input_embeddings", "lm_head"):
            own = self.role_tensor(self.d, role)
            self.report.own[role] = "absent" if own is None else "unknown"
            shares = [o for o in self.plan.ops("share_module") if o.role == role and o.layer is None]
            keeps = [o for o in self.plan.ops("keep") if o.role == role and o.layer is None]
            where = _loc(own, self.d, own.name if own else self.lay["roles"][role][0])
            if own is not None:
                self.check_shape(role, own)
            for op in keeps:
                if own is None and op.must_exist:
                    tied = role == "lm_head" and op.tied_to == "draft_embeddings" and \
                        self.role_tensor(self.d, "input_embeddings") is not None
                    if not tied:
                        self.add("SRG604", f"{role}: the recipe keeps the draft's own ({op.id}, must_exist) but the "
                                 f"draft checkpoint has no {' / '.join(self.lay['roles'][role][:2])}", where,
                                 "a reduced-vocabulary head needs its own lm_head (else the engine builds a random one "
                                 "or swaps in the target's: acceptance ~0, sglang#27908)")
                        self.report.decisions[role] = "missing: would stay randomly initialised"
                        continue
                self.report.decisions[role] = "draft keeps its own" + (" (tied to its embedding)" if own is None else "")
            for op in shares:
                self.decide_share(role, op, own, where)

    def check_shape(self, role: str, own: TensorInfo) -> None:
        rows = own.shape[0] if own.shape else None
        want = self.draft["vocab_size"] if role == "input_embeddings" else self.draft["output_vocab_size"]
        if len(own.shape) != 2 or rows != want:
            key = "vocab_size" if role == "input_embeddings" else "draft_vocab_size (or vocab_size)"
            self.add("SRG605", f"{role}: draft tensor {own.name} has shape {list(own.shape)}; the config's {key} says "
                     f"{want} rows", _loc(own, self.d, own.name))

    def decide_share(self, role: str, op, own: TensorInfo | None, where: Location) -> None:
        policy = op.if_draft_has_own or "share"
        if own is None:
            self.report.decisions[role] = "draft has none: the target's is used"
            self.add("SRG603", f"{role}: the draft checkpoint has none; at load time the draft uses the target's "
                     f"({op.id})", where, severity="info")
            return
        if policy == "share":
            self.report.decisions[role] = "draft's own is replaced by the target's"
            self.add("SRG603", f"{role}: the draft's own {own.name} is replaced by the target's at load time "
                     f"({op.id}, if_draft_has_own: share)", where, severity="info")
            return
        if policy == "keep":
            self.report.decisions[role] = "draft keeps its own"
            self.add("SRG603", f"{role}: the draft keeps its own {own.name} ({op.id}, if_draft_has_own: keep)", where,
                     severity="info")
            return
        # share_if_identical: the engine compares the tensors (vLLM: torch.equal) at load time
        theirs = self.role_tensor(self.t, role)
        if theirs is None:
            self.report.decisions[role] = "draft keeps its own (the target checkpoint has no such tensor to compare)"
            self.add("SRG603", f"{role}: the target checkpoint holds no {role} tensor; the draft keeps its own "
                     f"{own.name}", where, severity="info")
            return
        if own.shape != theirs.shape or own.dtype != theirs.dtype:
            self.report.own[role] = "differs"
            self.report.decisions[role] = "draft keeps its own (differs in shape or dtype)"
            self.add("SRG613", f"{role}: the draft brings its own {own.name} {own.dtype}{list(own.shape)}, unlike the "
                     f"target's {theirs.dtype}{list(theirs.shape)}: the engine keeps the draft's", where)
            return
        if not self.read_data:
            self.report.decisions[role] = "decided at load time (equality not read: --no-data-reads)"
            self.add("SRG615", f"{role}: the draft brings its own {own.name}, same shape as the target's; whether it is "
                     "shared depends on its values (not read)", where, severity="info")
            return
        size = own.end - own.start
        tail_at = max(0, size - EQUAL_READ_BYTES)
        # the four ranges are independent: side by side when a model is on the hub (each is a round trip)
        mine_head, their_head, mine_tail, their_tail = side_by_side(
            lambda: read_raw(own, 0, EQUAL_READ_BYTES), lambda: read_raw(theirs, 0, EQUAL_READ_BYTES),
            lambda: read_raw(own, tail_at, EQUAL_READ_BYTES), lambda: read_raw(theirs, tail_at, EQUAL_READ_BYTES),
            threaded=any_remote(getattr(self.draft, "model", None), getattr(self.target, "model", None)))
        head, tail = mine_head == their_head, mine_tail == their_tail
        span = min(size, 2 * EQUAL_READ_BYTES)
        which = "the whole tensor" if span >= size else f"its first and last {EQUAL_READ_BYTES} bytes"
        self.report.data_reads.append(f"{role}: compared {span} of {size} bytes of draft {own.name} and target "
                                      f"{theirs.name} ({which})")
        self.report.own[role] = "identical" if head and tail else "differs"
        if head and tail:
            self.report.decisions[role] = "identical in the bytes read: shared with the target's"
            self.add("SRG603", f"{role}: the draft's own {own.name} equals the target's in the {span} bytes read; "
                     f"the engine shares the target's ({op.id})", where, severity="info")
        else:
            self.report.decisions[role] = "differs from the target's: the draft keeps its own"
            self.add("SRG613", f"{role}: the draft's own {own.name} differs from the target's (bytes read: {span}); "
                     f"the engine keeps the draft's", where)

    # -- EAGLE-3 ------------------------------------------------------------------------------
    def check_plain_eagle3_head(self) -> None:
        """A plain config that vLLM renames to an EAGLE-3 head (SRG207 from the config alone): the
        checkpoint's fc is the marker the config lacks. An fc of 2-5 x hidden input width accepts it
        (SRG206 naming the fc); no fc, or another width, keeps the refusal with what the weights showed."""
        refused = [d for d in self.plan.diagnostics if d.code == "SRG207"]
        if not refused:
            return
        self.report.superseded.add("SRG207")
        names = self.lay["eagle3"]["fc"]
        fc = self.d.first(names)
        hidden = servedarch.marker_hidden(self.draft.raw)
        k = servedarch.fc_marker(fc.shape if fc is not None else None, self.draft.raw)
        archs = list(self.draft.architectures)
        method = (self.recipe.engine.get("vllm") or {}).get("method")
        served = list(servedarch.served_architectures(method, archs))
        if fc is not None and k is not None:
            renamed = ", ".join(f"{a} -> {s}" for a, s in zip(archs, served) if a != s)
            self.add("SRG206", f"draft architectures {archs} read as vLLM reads them under method {method}: {renamed} "
                     f"(transformers_utils/configs/eagle.py EAGLEConfig); EAGLE-3 marker from the weights: {fc.name} "
                     f"{list(fc.shape)} takes {fc.shape[1]} inputs = {k} x hidden {hidden} (the config has none of "
                     f"{', '.join(servedarch.EAGLE3_MARKERS)})", _loc(fc, self.d, fc.name))
            return
        low, high = servedarch.FC_MARKER_AUX
        if fc is None:
            seen = f"the checkpoint has no {' / '.join(names)}"
        else:
            width = fc.shape[1] if len(fc.shape) == 2 else None
            ratio = f" = {width / hidden:g} x hidden {hidden}" if width and hidden else ""
            seen = f"its {fc.name} {list(fc.shape)} takes {width} inputs{ratio}"
        self.add("SRG207", f"{refused[0].message}; nor do the weights: {seen}, not {low}-{high} x hidden "
                 f"{hidden} (an EAGLE-3 fc fuses {low}-{high} target hidden states)",
                 refused[0].location if fc is None else _loc(fc, self.d, fc.name))

    def check_eagle3(self) -> None:
        e3 = self.lay["eagle3"]
        cap = self.plan.ops("capture_hidden_states")[0]
        n_aux = len(cap.layers or ())
        target_hidden = self.draft["target_hidden_size"] or self.target["hidden_size"]
        method = (self.recipe.engine.get("vllm") or {}).get("method")
        fc = self.d.first(e3["fc"])
        if is_v4_drafter(self.draft, method):
            self.check_v4_main_proj(cap, n_aux)  # DeepSeek-V4's own DSpark drafter: no fc, its main_proj
        elif fc is None:
            self.add("SRG609", f"EAGLE-3 head without an fc layer ({' / '.join(e3['fc'])}): nothing consumes the "
                     f"{n_aux} captured target hidden states", Location(self.d.folder, key_path=e3["fc"][0]))
        elif len(fc.shape) != 2 or fc.shape[1] != n_aux * target_hidden:
            width = fc.shape[1] if len(fc.shape) == 2 else None
            sized = (f", i.e. sized for {width // target_hidden} aux layers" if width and width % target_hidden == 0
                     else "")
            self.add("SRG609", f"EAGLE-3 fc {fc.name} {list(fc.shape)} takes {width} inputs{sized}; the plan captures "
                     f"{n_aux} target layers ({', '.join(map(str, cap.layers or ()))}) x hidden {target_hidden} = "
                     f"{n_aux * target_hidden}", _loc(fc, self.d, fc.name),
                     "set eagle_aux_hidden_state_layer_ids (and num_aux_hidden_states) in the head's config to the "
                     "layers it was trained on (vllm#50170)")
        reduced = self.draft["output_vocab_size"] != self.draft["vocab_size"]
        d2t, t2d = self.d.first(e3["d2t"]), self.d.first(e3["t2d"])
        dv, v = self.draft["output_vocab_size"], self.draft["vocab_size"]
        if reduced and d2t is None:
            self.add("SRG606", f"draft_vocab_size {dv} < vocab_size {v} but the checkpoint has no d2t: the engine "
                     f"leaves the map at zeros and draft id i proposes target id i (the first {dv} target tokens)",
                     Location(self.d.folder, key_path=e3["d2t"][0]),
                     "export d2t (draft id -> target id offsets) with the head (NVIDIA-NeMo/Automodel#2447)")
        if d2t is not None:
            if d2t.shape != (dv,) or not d2t.dtype.startswith(("I", "U")):
                self.add("SRG607", f"d2t is {d2t.dtype}{list(d2t.shape)}; expected an integer vector of draft_vocab_size "
                         f"{dv}", _loc(d2t, self.d, d2t.name))
            elif reduced:
                self.check_d2t_convention(d2t, dv, v)
        if t2d is not None and (t2d.shape != (v,) or t2d.dtype not in ("BOOL", "U8", "I8")):
            self.add("SRG607", f"t2d is {t2d.dtype}{list(t2d.shape)}; expected a boolean mask of vocab_size {v}",
                     _loc(t2d, self.d, t2d.name))

    def check_v4_main_proj(self, cap, n_aux: int) -> None:
        """SRG609 for DeepSeek-V4's own DSpark drafter (DSparkDeepseekV4ForCausalLM, every vLLM wheel 0.25.0-0.34.0,
        each platform's dspark.py): it has no fc; the captured target states go through `model.main_proj`
        (ReplicatedLinear, hidden x len(dspark_target_layer_ids) -> hidden), which load_weights fills from the
        checkpoint's `mtp.{i}.main_proj.*` alone (`_remap_dspark_name`: main_proj.* of any stage -> model.main_proj.*;
        SGLang's DeepseekV4ForCausalLMDSpark keeps it on stage 0, mtp.0.main_proj). Its width is judged against its
        own output rows (the checkpoint's hidden size), so what is said is the number of layers it fuses."""
        found = sorted((n for n in self.d.tensors if _V4_MAIN_PROJ.match(n)), key=lambda n: (n != "mtp.0.main_proj.weight", n))
        if not found:
            self.add("SRG609", f"DeepSeek-V4's DSpark drafter without its main_proj (mtp.0.main_proj.weight): vLLM's "
                     f"DSparkDeepseekV4ForCausalLM fuses the {n_aux} captured target hidden states through model.main_proj, "
                     "which load_weights fills only from mtp.<i>.main_proj.* (_remap_dspark_name), and the checkpoint "
                     "has none: the drafter runs with an unloaded main_proj (the loader's check of unloaded weights "
                     "runs for unquantised checkpoints only: \"Following weights were not initialized from checkpoint\")",
                     Location(self.d.folder, key_path="mtp.0.main_proj.weight"),
                     "export the drafter's stage tensors with it (DeepSeek-V4-Flash-DSpark: mtp.0.main_proj)")
            return
        proj = self.d.tensors[found[0]]
        if len(proj.shape) != 2 or proj.dtype in _PACKED:
            return  # a packed (FP4) or otherwise laid-out weight: its width is not the input count
        out_rows, width = proj.shape
        if out_rows and width != n_aux * out_rows:
            sized = f", i.e. {width // out_rows} target layers" if width % out_rows == 0 else ""
            self.add("SRG609", f"DeepSeek-V4's DSpark drafter: {proj.name} {list(proj.shape)} fuses {width} inputs = "
                     f"{width / out_rows:g} x its hidden {out_rows}{sized}; the plan captures {n_aux} target layers "
                     f"({', '.join(map(str, cap.layers or ()))}) and vLLM builds main_proj for hidden x "
                     "len(dspark_target_layer_ids): its weight loader refuses the shape (ReplicatedLinear.weight_loader: "
                     "\"Tried to load weights of size ...\")",
                     _loc(proj, self.d, proj.name),
                     "set dspark_target_layer_ids to the layers the drafter was trained on")

    def check_d2t_convention(self, d2t: TensorInfo, dv: int, v: int) -> None:
        """vLLM reads d2t as OFFSETS (target id = i + d2t[i]); some exporters write absolute ids, or
        an all-zero / arange default. Decided from the values (bounded read)."""
        if not self.read_data:
            return
        try:
            values = read_values(d2t, 0, D2T_READ_LIMIT)
        except SurgeryError as exc:  # SRG026: FP8 d2t, a short file: the check is not made, and said so
            if exc.diagnostics[0].code != "SRG026":
                raise
            self.add("SRG615", f"d2t convention not checked: {exc.diagnostics[0].message}", _loc(d2t, self.d, d2t.name),
                     severity="info")
            return
        self.report.data_reads.append(f"d2t: decoded {len(values)} of {dv} values to check the offsets convention")
        targets = [i + off for i, off in enumerate(values)]
        where = _loc(d2t, self.d, d2t.name)
        if all(off == 0 for off in values):
            self.add("SRG608", f"d2t is all zeros in the {len(values)} values read: draft id i proposes target id i",
                     where, "a draft vocabulary that is exactly the first draft_vocab_size target tokens is rare; "
                     "re-export d2t as offsets (verl-SpeCo#67)")
        elif any(not 0 <= t < v for t in targets):
            absolute = all(0 <= x < v for x in values) and all(values[i] >= i for i in range(len(values)))
            self.add("SRG608", f"d2t read as offsets maps draft ids outside the target vocabulary (e.g. draft id "
                     f"{next(i for i, t in enumerate(targets) if not 0 <= t < v)})"
                     + ("; its values look like absolute target ids" if absolute else ""), where,
                     "the engine computes target id = draft id + d2t[draft id]: store offsets, d2t[i] = target_id(i) - i")
        elif any(b <= a for a, b in zip(targets, targets[1:])):
            self.add("SRG608", "d2t maps two draft ids onto the same (or a decreasing) target id: not a "
                     "draft -> target offsets table", where, severity="warning")

    # -- MTP / draft-side layer sets -------------------------------------------------------------
    def check_draft_layer_sets(self) -> None:
        pattern = self.lay["layer_prefix"].get(self.target.model_type, self.lay["layer_prefix"]["default"])
        for name, spec in getattr(self.recipe, "layer_sets", {}).items():
            if spec.side != "draft":
                continue
            for k in self.plan.layer_set(name):
                # {i}: the MTP layer's own index, for checkpoints that number it apart (DeepSeek V4: mtp.{i}.)
                prefix = pattern.format(k=k, i=k - (self.target.num_layers or 0))
                if not self.d.with_prefix(prefix):
                    self.add("SRG610", f"layer set {name}: the plan maps draft layer {k}, but the checkpoint has no "
                             f"tensor under `{prefix}`", Location(self.d.folder, key_path=prefix + "*"),
                             "the MTP weights are missing (a checkpoint exported without them) or numbered differently")

    # -- KV-cache scales -------------------------------------------------------------------------
    def check_kv_scales(self) -> None:
        if not str(self.plan.runtime.kv_cache_dtype).startswith("fp8"):
            return
        suffixes = tuple(self.lay["kv_scale_suffixes"])
        target_scales = [t for n, t in self.t.tensors.items() if n.endswith(suffixes)]
        shares = self.plan.ops("share_kv")
        if not target_scales:
            self.add("SRG611", "FP8 KV cache, the target ships no calibrated KV scales: every layer uses 1.0",
                     Location(self.t.folder), severity="info")
            return
        if not shares:
            return
        copied = {o.attr for o in self.plan.ops("copy_attrs")}
        if not {"_k_scale", "_v_scale"} <= copied:
            readers = sorted({o.target_layer for o in shares})
            self.add("SRG611", f"FP8 KV cache and the target ships calibrated KV scales ({len(target_scales)} tensors, "
                     f"e.g. {target_scales[0].name}), but the plan copies none onto the draft layers that read target "
                     f"layers {readers}: they read K/V with scale 1.0", _loc(target_scales[0], self.t, target_scales[0].name),
                     "use a recipe with copy_attrs of _k_scale/_v_scale (gemma4-mtp), see vllm#49262",
                     severity="error")
        else:
            self.add("SRG611", f"FP8 KV cache with calibrated target scales ({len(target_scales)} tensors): the plan "
                     "copies them onto the draft layers that read them", _loc(target_scales[0], self.t,
                                                                              target_scales[0].name), severity="info")

    # -- KV-shared layers ------------------------------------------------------------------------
    def check_kv_shared_layers(self) -> None:
        need = self.lay["kv_shared_layer_tensors"].get(self.draft.model_type)
        if need:
            for layer in self.draft.layers:
                if layer.kv_shared:
                    self._require(self.d, need, layer.index, "draft KV-shared layer")
        producers = self.lay["kv_producer_tensors"].get(self.target.model_type)
        if producers:
            for t in sorted({o.target_layer for o in self.plan.ops("share_kv")}):
                self._require(self.t, producers, t, "target layer read by the draft")

    def _require(self, ckpt: Checkpoint, patterns: list[str], k: int, what: str) -> None:
        for pattern in patterns:
            names = [p.format(k=k) for p in pattern.split("|")]
            if ckpt.first(names) is None:
                self.add("SRG612", f"{what} {k}: no {names[0]} in the checkpoint", Location(ckpt.folder, key_path=names[0]),
                         "the engine builds this tensor and would leave it uninitialised")


def weights_catalogue3(draft, target, dckpt, tckpt) -> list[Diagnostic]:
    """`--weights`: the quantised target's own MTP block (SRG616 / SRG617, mtp_quant.py) and a DFlash 2
    checkpoint that carries a d2t map under a full vocabulary (a reduced one is said from the config)."""
    out = mtp_quant_check(target, tckpt, same_checkpoint=dckpt is tckpt)
    if is_dflash2(draft) and draft["output_vocab_size"] == draft["vocab_size"]:
        if dckpt.first(load_data("data/weights_layout.yaml")["eagle3"]["d2t"]) is not None:
            out += dflash2_check(draft, has_d2t=True)
    return out


def _source(facts, path):
    """The model source the facts were read from (a hub commit, a folder), else the path given; a
    config file stands for its folder here."""
    src = facts.model if getattr(facts, "model", None) is not None else open_model(path)
    if src.is_local and src.is_config_file:
        return LocalSource(_folder(src.ref))
    return src


def check_weights(plan, recipe, draft, target, draft_dir, target_dir, *, read_data: bool = True) -> WeightsReport:
    """Weights checks for a resolved plan; SurgeryError (SRG600-602) when a checkpoint is unreadable.
    Hub models are read by range requests (headers, the d2t slice), never downloaded."""
    dsrc, tsrc = _source(draft, draft_dir), _source(target, target_dir)
    if dsrc.same_model(tsrc):
        dckpt = tckpt = read_checkpoint(dsrc)
    else:  # the two headers side by side (hub round trips; local reads stay in this thread)
        dckpt, tckpt = side_by_side(lambda: read_checkpoint(dsrc), lambda: read_checkpoint(tsrc),
                                    threaded=any_remote(dsrc, tsrc))
    return _Checker(plan, recipe, draft, target, dckpt, tckpt, read_data).run()


def checkpoint_of(facts, path) -> Checkpoint:
    """The checkpoint (all headers) of the model the facts were read from: `--engine-check --weights` compares
    the engine's constructed shapes with it (surgery/commands/checks.py)."""
    return read_checkpoint(_source(facts, path))
