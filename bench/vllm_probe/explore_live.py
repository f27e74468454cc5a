"""Start the spec engine in-process and dump the live wiring (exploration aid)."""
import os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
sys.path.insert(0, os.path.dirname(__file__))
from run_probe import make_llm, generate

base = sys.argv[1] if len(sys.argv) > 1 else "/tmp/vllm_probe"
llm, dt = make_llm(f"{base}/target", f"{base}/draft")
print("START", dt)
eng = llm.llm_engine
print("llm_engine", type(eng))
ec = eng.engine_core
print("engine_core", type(ec))
core = ec.engine_core
print("engine_core.engine_core", type(core))
ex = core.model_executor
print("model_executor", type(ex))
dw = ex.driver_worker
print("driver_worker", type(dw))
w = dw.worker
print("worker", type(w))
r = w.model_runner
print("runner", type(r), type(r).__mro__[:3])
d = r.drafter
print("drafter", type(d), [c.__name__ for c in type(d).__mro__])
print("draft model", type(d.model), "target", type(r.model))
print("shared_kv_cache_layers", r.shared_kv_cache_layers)
print("_draft_attn_layer_names", sorted(d._draft_attn_layer_names))
print("draft_attn_groups", [(g.kv_cache_group_id, g.layer_names, type(g.kv_cache_spec).__name__, g.kernel_block_size) for g in d.draft_attn_groups])
print("kv_cache_config groups", [(type(g.kv_cache_spec).__name__, g.layer_names) for g in r.kv_cache_config.kv_cache_groups])
sfc = r.compilation_config.static_forward_context
print("sfc keys", list(sfc))
print("draft vllm_config sfc is same?", r.vllm_config.compilation_config.static_forward_context is d.vllm_config.compilation_config.static_forward_context)
for name, a in sfc.items():
    kv = a.kv_cache
    kinds = {n: ("buffer" if n in dict(a.named_buffers(recurse=False)) else "param" if n in dict(a.named_parameters(recurse=False)) else "attr") for n in ("_k_scale", "_v_scale", "_q_scale", "_prob_scale")}
    print(name, type(a).__name__, "kvshare=", a.kv_sharing_target_layer_name, "impl.kvshare=", a.impl.kv_sharing_target_layer_name,
          "impl", type(a.impl).__name__, "backend", a.attn_backend.get_name(),
          "kv", tuple(kv.shape), kv.dtype, kv.data_ptr(), id(kv), "sw", a.sliding_window, "hs", a.head_size, "nkv", a.num_kv_heads)
    print("   scales", kinds, a._k_scale, a._v_scale, a._k_scale_float, a._v_scale_float, a._k_scale_cpu, a._v_scale_cpu, a._q_scale_float, getattr(a, "_q_scale", None), a.kv_cache_dtype, a.layer_name)
for dn, dl in d.model.model.layers.named_children():
    a = dl.self_attn.attn
    t = sfc[a.kv_sharing_target_layer_name]
    print("draft", dn, a.layer_name, "->", t.layer_name, "same obj", a.kv_cache is t.kv_cache, "same ptr", a.kv_cache.data_ptr() == t.kv_cache.data_ptr(), a.kv_cache.shape == t.kv_cache.shape, a.kv_cache.stride() == t.kv_cache.stride())
print("embed shared", d.model.model.embed_tokens is r.model.model.embed_tokens)
print("lm_head", type(d.model.lm_head), d.model.lm_head.weight is d.model.model.embed_tokens.weight if hasattr(d.model.lm_head,'weight') else None)
print("kv_caches list len", len(r.kv_caches))
for name,a in sfc.items(): print("kvview", name, a.kv_cache.stride(), a.kv_cache.storage_offset(), a.kv_cache.untyped_storage().data_ptr(), a.kv_cache.untyped_storage().nbytes())
print("lm_head tie", d.model.lm_head.weight.shape, d.model.model.embed_tokens.weight.shape)
print("get_metrics", [(m.name, getattr(m, 'value', None) if hasattr(m,'value') else getattr(m, 'values', None)) for m in llm.get_metrics() if 'spec' in m.name])
print(generate(llm))
print("get_metrics", [(m.name, getattr(m, 'value', None) if hasattr(m,'value') else getattr(m, 'values', None)) for m in llm.get_metrics() if 'spec' in m.name])
res = llm.collective_rpc(lambda self: type(self.model_runner.drafter).__name__)
print("collective_rpc", res)
