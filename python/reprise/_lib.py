"""_lib.py — finds and loads libreprise.so, and declares include/reprise.h to ctypes.

Every struct below mirrors its C declaration field by field, with the C names (tests/test_layout.py compiles
a C program that checks each size and offset against the header); every function gets its argtypes and
restype. Nothing here is public: the classes of the package wrap it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_float, c_int, c_int32,
                    c_int64, c_long, c_size_t, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p)

#: the library's major version these declarations are written for (its SONAME is libreprise.so.MAJOR)
ABI_MAJOR = 0

# ---------------------------------------------------------------------------------------------------------
# finding the library
# ---------------------------------------------------------------------------------------------------------
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def candidates(pkg_dir: str = _PKG_DIR, environ=None) -> list:
    """The places the library is looked for, in order, as (how, what) pairs; `what` is a path, or a name
    for the dynamic loader. REPRISE_LIBRARY, when set, is the only candidate."""
    environ = os.environ if environ is None else environ
    lib = environ.get("REPRISE_LIBRARY")
    if lib:
        return [("REPRISE_LIBRARY", lib)]
    out = []
    # installed next to the package: in it, or beside it (site-packages)
    for d in (pkg_dir, os.path.dirname(pkg_dir)):
        found = sorted(glob.glob(os.path.join(glob.escape(d), "libreprise.so*")), key=len)
        out += [("next to the package", p) for p in found] or \
            [("next to the package", os.path.join(d, "libreprise.so*"))]
    # a checkout: python/reprise/ -> build/libreprise.so
    out.append(("the build tree", os.path.normpath(os.path.join(pkg_dir, "..", "..", "build", "libreprise.so"))))
    found = ctypes.util.find_library("reprise")
    out.append(("ctypes.util.find_library('reprise')", found))
    return out


class LibraryNotFound(ImportError):
    """No libreprise.so could be loaded; the message lists every place tried and why each failed."""


def _load():
    tried = []
    for how, what in candidates():
        if not what:
            tried.append("%s: nothing found" % how)
            continue
        if os.sep in what and not os.path.exists(what):
            tried.append("%s: %s: no such file" % (how, what))
            continue
        try:
            lib = ctypes.CDLL(what)
        except OSError as e:
            tried.append("%s: %s: %s" % (how, what, e))
            continue
        try:
            lib.rp_version
        except AttributeError:
            tried.append("%s: %s: not libreprise (no rp_version)" % (how, what))
            continue
        return lib, what, how
    raise LibraryNotFound("reprise: cannot load libreprise.so; tried:\n  " + "\n  ".join(tried) +
                          "\nSet REPRISE_LIBRARY to the library's path (e.g. build/libreprise.so), or install it "
                          "(`cmake --install build`) where the dynamic loader finds it.")


lib, path, found_by = _load()

# ---------------------------------------------------------------------------------------------------------
# types
# ---------------------------------------------------------------------------------------------------------
c_token = c_int32
progress_fn = CFUNCTYPE(c_bool, c_void_p, c_uint64, c_uint64)
token_fn = CFUNCTYPE(c_bool, c_void_p, c_token, c_void_p, c_size_t)          # text as a pointer: not NUL-ended
agent_token_fn = CFUNCTYPE(c_bool, c_void_p, c_int64, c_token)
logits_fn = CFUNCTYPE(None, c_void_p, POINTER(c_token), c_int32, POINTER(c_float), c_int32)
listening_fn = CFUNCTYPE(None, c_void_p, c_uint16)
chosen_fn = CFUNCTYPE(None, c_void_p, c_token, POINTER(c_float), c_int32)


class rp_logit_bias(Structure):
    _fields_ = [("token", c_token), ("bias", c_float)]


class rp_sampler_params(Structure):
    _fields_ = [("temp", c_float), ("top_k", c_int32), ("top_p", c_float), ("min_p", c_float),
                ("repeat_penalty", c_float), ("repeat_last_n", c_int32), ("presence_penalty", c_float),
                ("frequency_penalty", c_float), ("seed", c_uint64), ("bias", POINTER(rp_logit_bias)),
                ("n_bias", c_int32)]


class rp_model_params(Structure):
    _fields_ = [("vocab_only", c_bool), ("n_threads", c_int), ("cpu_level", c_int), ("progress", progress_fn),
                ("progress_user", c_void_p), ("n_gpu_layers", c_int32), ("gpu_device", c_char_p)]


class rp_model_desc(Structure):
    _fields_ = [("name", c_char_p), ("arch", c_char_p), ("chat_format", c_char_p), ("n_vocab", c_int32),
                ("n_ctx_train", c_int32), ("n_embd", c_int32), ("n_ff", c_int32), ("n_layer", c_int32),
                ("n_head", c_int32), ("n_head_kv", c_int32), ("head_dim", c_int32), ("weight_bytes", c_uint64),
                ("fingerprint", c_uint64), ("has_weights", c_bool), ("has_tokenizer", c_bool), ("n_rot", c_int32),
                ("rope_neox", c_bool), ("rope_llama3", c_bool), ("rope_base", c_float), ("rms_eps", c_float),
                ("tied_output", c_bool), ("tokenizer", c_char_p), ("n_tokens", c_int32), ("n_swa", c_int32),
                ("n_swa_layers", c_int32)]


class rp_grammar_stats(Structure):
    _fields_ = [("masks_built", c_uint64), ("cache_hits", c_uint64), ("checks", c_uint64),
                ("checks_rejected", c_uint64), ("cache_entries", c_uint64), ("cache_bytes", c_uint64),
                ("cache_cap_bytes", c_uint64), ("evictions", c_uint64), ("build_ms", c_double), ("busy_ms", c_double)]


class rp_chat_message(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p), ("tool_calls", c_char_p), ("tool_call_id", c_char_p),
                ("name", c_char_p)]


class rp_static_shapes(Structure):
    _fields_ = [("L_P", c_int32), ("L_S", c_int32), ("lat_P_ms", c_double), ("lat_S_ms", c_double),
                ("calibrated", c_bool)]


class rp_engine_params(Structure):
    _fields_ = [("n_threads", c_int), ("n_ctx", c_int32), ("n_batch", c_int32), ("kv_type", c_int),
                ("swa_full", c_bool), ("reuse", c_int), ("recompute_ratio", c_float), ("select", c_int), ("check_layer", c_int32),
                ("static_mode", c_bool), ("naive_schedule", c_bool), ("cache_ram_bytes", c_size_t),
                ("cache_dir", c_char_p), ("cache_disk_bytes", c_uint64), ("cache_dir_optional", c_bool),
                ("load_calibration", c_bool), ("cache_read_only", c_bool), ("n_ctx_over_train", c_bool),
                ("deviation", c_int32), ("n_seq_max", c_int32), ("cache_policy", c_int),
                ("cache_prefetch", c_bool), ("pipeline", c_bool), ("async_load", c_bool),
                ("cache_sync_persist", c_bool), ("cache_naive_store", c_bool), ("static_shapes", rp_static_shapes),
                ("cache_terms", c_bool), ("embed_model", c_char_p), ("embed_dim", c_int32)]


class rp_engine_stats(Structure):
    _fields_ = [(n, c_uint64) for n in ("cache_chunks", "cache_bytes", "inserts", "evictions", "prefix_hits",
                                        "content_hits", "misses", "flash_hits", "loads", "load_failures",
                                        "prefetched", "prefetch_used", "written", "write_failures")] + \
               [("has_store", c_bool), ("store_bytes", c_uint64), ("store_damaged", c_bool),
                ("store_evictions", c_uint64), ("load_bytes", c_uint64), ("load_ms", c_double),
                ("write_bytes", c_uint64), ("write_ms", c_double)] + \
               [(n, c_uint64) for n in ("dropped_dirty", "transient_chunks", "transient_bytes", "dirty_chunks",
                                        "indexed_chunks", "index_failures")] + \
               [("index_ms", c_double)]


class rp_gen_opts(Structure):
    _fields_ = [("sampling", rp_sampler_params), ("max_tokens", c_int32), ("ignore_eos", c_bool),
                ("stop", POINTER(c_char_p)), ("n_stop", c_int32), ("reuse", c_int), ("recompute_ratio", c_float),
                ("select", c_int), ("static_mode", c_int), ("cache_namespace", c_uint64), ("persist", c_bool),
                ("on_token", token_fn), ("user", c_void_p), ("recompute_marks", POINTER(c_uint8)),
                ("on_logits", logits_fn), ("logits_user", c_void_p), ("reseed", c_bool),
                ("on_chosen", chosen_fn), ("chosen_user", c_void_p)]


class rp_gen_stats(Structure):
    _fields_ = [(n, c_int32) for n in ("prompt_tokens", "reused_prefix", "reused_prefix_exact",
                                       "reused_nonprefix", "recomputed", "computed", "load_failed", "generated")] + \
               [(n, c_double) for n in ("ttft_ms", "prefill_ms", "decode_ms", "prompt_tok_per_s",
                                        "gen_tok_per_s")] + \
               [("stop", c_int)] + \
               [(n, c_int32) for n in ("chunks", "subchunk", "computed_rows", "calls", "pad_rows", "attempts")] + \
               [(n, c_double) for n in ("match_ms", "load_ms", "load_exposed_ms", "compute_ms", "plan_ms")] + \
               [("bytes_loaded", c_uint64), ("static_shapes", c_bool), ("calibrated", c_bool),
                ("commit_status", c_int), ("last_token", c_token)]


class rp_agents_params(Structure):
    _fields_ = [("max_agents", c_int32), ("max_active", c_int32), ("n_ctx", c_int32), ("n_batch", c_int32),
                ("kv_type", c_int), ("swa_full", c_bool), ("n_threads", c_int), ("policy", c_int), ("draft", c_void_p),
                ("drafter", c_int),
                ("kv_limit_mb", c_double), ("self_layers", c_int32), ("prefill_share", c_float),
                ("draft_budget", c_int32), ("draft_min", c_int32), ("hal_tau", c_float), ("hal_gamma", c_float),
                ("draft_fixed", c_int32), ("draft_max", c_int32)]


class rp_turn_opts(Structure):
    _fields_ = [("sampling", rp_sampler_params), ("max_tokens", c_int32), ("stop", POINTER(c_char_p)),
                ("n_stop", c_int32), ("suspend_on_tool_call", c_bool), ("wait_after", c_bool),
                ("on_token", agent_token_fn), ("user", c_void_p), ("on_logits", logits_fn),
                ("logits_user", c_void_p), ("on_chosen", chosen_fn), ("chosen_user", c_void_p),
                ("ignore_eos", c_bool)]


class rp_agent_info(Structure):
    _fields_ = [("state", c_int), ("n_tokens", c_int32), ("generated", c_int32), ("drafted", c_uint64),
                ("accepted", c_uint64), ("stop", c_int), ("n_cached", c_int32), ("has_slot", c_bool),
                ("demoted", c_bool), ("demotions", c_uint64), ("restores", c_uint64), ("last_step", c_int64),
                ("turn_stop", c_int), ("last_role", c_int), ("last_draft", c_int32), ("last_accepted", c_int32),
                ("hal", c_float), ("n_turns", c_int32), ("prompt_tokens", c_uint64), ("gen_tokens", c_uint64)]


class rp_agents_stats(Structure):
    _fields_ = [(n, c_uint64) for n in ("steps", "rows", "generated", "drafted", "accepted")] + \
               [(n, c_int32) for n in ("agents", "active", "waiting", "demoted")] + \
               [(n, c_uint64) for n in ("kv_bytes", "demotions", "restores", "prefill_rows")] + \
               [(n, c_double) for n in ("draft_s", "target_s", "total_s")] + [("forwards", c_uint64)]


class rp_cache_info(Structure):
    _fields_ = [(n, c_uint64) for n in ("chunks", "corrupt", "files", "blobs", "raw_bytes", "stored_bytes",
                                        "disk_bytes", "keywords", "vectors", "write_failures")] + \
               [("models", c_int32), ("terms", c_uint64), ("term_docs", c_uint64)]


class rp_cache_entry(Structure):
    _fields_ = [("id", c_uint64), ("parent", c_uint64), ("model", c_int64), ("n_tokens", c_int32),
                ("pos0", c_int32), ("exact", c_bool), ("in_file", c_bool), ("compressed", c_bool),
                ("raw_bytes", c_uint64), ("stored_bytes", c_uint64), ("hits", c_uint64), ("last_used", c_uint64),
                ("used_at", c_double), ("tokens", POINTER(c_token))]


class rp_cache_model(Structure):
    _fields_ = [("id", c_int64), ("salt", c_uint64), ("name", c_char_p), ("kv_type", c_int), ("n_layer", c_int32),
                ("row_bytes", c_uint64), ("chunks", c_uint64), ("bytes", c_uint64)]


# analysis, calibration, model files
class rp_plan_chunk(Structure):
    _fields_ = [("begin", c_int32), ("len", c_int32), ("hash", c_uint64), ("label", c_int)]


class rp_plan_segment(Structure):
    _fields_ = [("kind", c_int), ("begin", c_int32), ("len", c_int32)]


class rp_plan_call(Structure):
    _fields_ = [("recompute", c_bool)] + [(n, c_int32) for n in ("begin", "end", "n_new", "n_reuse", "padding")]


class rp_plan_desc(Structure):
    _fields_ = [(n, c_int32) for n in ("n_tokens", "reused_prefix", "reused_prefix_exact", "reused_nonprefix",
                                       "computed", "recompute_dynamic")] + \
               [("token_kind", POINTER(c_uint8)), ("chunks", POINTER(rp_plan_chunk)), ("n_chunks", c_int32),
                ("segments", POINTER(rp_plan_segment)), ("n_segments", c_int32), ("shapes", rp_static_shapes),
                ("dp_calls", POINTER(rp_plan_call)), ("n_dp_calls", c_int32), ("dp_cost", c_double),
                ("naive_calls", POINTER(rp_plan_call)), ("n_naive_calls", c_int32), ("naive_cost", c_double)]


class rp_calibrate_params(Structure):
    _fields_ = [("sizes", POINTER(c_int32)), ("n_sizes", c_int32), ("reps", c_int32)]


class rp_calibration(Structure):
    _fields_ = [("n_points", c_int32), ("sizes", c_int32 * 64), ("prefill_ms", c_double * 64),
                ("recompute_ms", c_double * 64), ("shapes", rp_static_shapes), ("recompute_ratio", c_float),
                ("n_threads", c_int)]


class rp_model_synth_params(Structure):
    _fields_ = [("arch", c_char_p), ("preset", c_char_p), ("type", c_char_p), ("vocab_path", c_char_p),
                ("seed", c_uint64), ("n_threads", c_int), ("peak", c_float), ("progress", progress_fn),
                ("progress_user", c_void_p)]


class rp_model_file_desc(Structure):
    _fields_ = [("version", c_uint32), ("alignment", c_uint32), ("file_size", c_uint64), ("data_offset", c_uint64),
                ("n_meta", c_int64), ("n_tensors", c_int64), ("tensor_bytes", c_uint64)]


class rp_meta_entry(Structure):
    _fields_ = [("key", c_char_p), ("type", c_int), ("type_name", c_char_p), ("u", c_uint64), ("i", c_int64),
                ("f", c_double), ("b", c_bool), ("str", c_void_p), ("str_len", c_uint64), ("elem_type", c_int),
                ("n_elems", c_uint64)]


class rp_tensor_desc(Structure):
    _fields_ = [("name", c_char_p), ("type", c_int), ("type_name", c_char_p), ("n_dims", c_int32),
                ("ne", c_int64 * 4), ("offset", c_uint64), ("bytes", c_uint64)]


class rp_type_share(Structure):
    _fields_ = [("type", c_int), ("type_name", c_char_p), ("n_tensors", c_int64), ("bytes", c_uint64)]


class rp_cpu_desc(Structure):
    _fields_ = [("brand", c_char_p)] + \
               [(n, c_bool) for n in ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl",
                                      "avx512vnni", "avx512bf16", "avx512fp16", "avxvnni", "amx_tile", "amx_int8",
                                      "amx_bf16", "os_avx", "os_avx512", "os_amx", "amx_permitted", "amx_opt_in")] + \
               [("best", c_char_p), ("active", c_char_p), ("thp", c_char * 32), ("huge_pages", c_bool)]


class rp_kernel_desc(Structure):
    _fields_ = [("op", c_char_p), ("type", c_char_p), ("kernel", c_char_p)]
class rp_gpu_mem_type(Structure):
    _fields_ = [("heap_bytes", c_uint64)] + \
               [(n, c_bool) for n in ("device_local", "host_visible", "host_coherent", "host_cached")]


class rp_gpu_desc(Structure):
    _fields_ = [("index", c_int32), ("name", c_char * 256), ("kind", c_char_p), ("vendor_id", c_uint32),
                ("device_id", c_uint32), ("api_version", c_char * 24), ("driver", c_char * 128),
                ("subgroup_size", c_uint32)] + \
               [(n, c_bool) for n in ("usable", "shared_memory", "fp16", "int8_dot", "cooperative_matrix")] + \
               [("device_local_bytes", c_uint64), ("n_mem_types", c_int32), ("mem_types", rp_gpu_mem_type * 32)]


class rp_tool_call(Structure):
    _fields_ = [("id", c_char_p), ("name", c_char_p), ("arguments", c_char_p)]


class rp_reasoning_span(Structure):
    _fields_ = [(n, c_size_t) for n in ("reasoning_begin", "reasoning_end", "content_begin", "content_end")] + \
               [("has_reasoning", c_bool), ("in_reasoning", c_bool)]


class rp_chat_vars(Structure):
    _fields_ = [("enable_thinking", c_int), ("reasoning_effort", c_char_p), ("vars_json", c_char_p)]


class rp_server_params(Structure):
    _fields_ = [("model_path", c_char_p), ("draft_path", c_char_p), ("load_progress", progress_fn),
                ("load_progress_user", c_void_p), ("n_ctx", c_int32), ("n_threads", c_int), ("parallel", c_int),
                ("queue_max", c_int), ("max_sessions", c_int), ("cache_dir", c_char_p), ("cache_ram_mb", c_size_t),
                ("cache_disk_gb", c_double), ("embed_model", c_char_p), ("embed_dim", c_int32), ("reuse", c_int),
                ("recompute_ratio", c_float), ("kv_type", c_int), ("swa_full", c_bool), ("speculate", c_bool),
                ("kv_limit_mb", c_double), ("host", c_char_p), ("port", c_uint16),
                ("api_key", c_char_p), ("api_key_file", c_char_p), ("cache_namespace", c_int),
                ("key_max_sessions", c_int), ("key_kv_mb", c_double), ("model_id", c_char_p), ("max_body", c_size_t),
                ("max_depth", c_int), ("max_messages", c_int), ("default_max_tokens", c_int32),
                ("timeout_s", c_double), ("session_ttl_s", c_double), ("max_connections", c_int),
                ("max_connections_per_ip", c_int), ("header_timeout_s", c_double), ("body_timeout_s", c_double),
                ("idle_timeout_s", c_double), ("quiet", c_bool), ("chat_template", c_char_p),
                ("grammar", c_char_p), ("on_listening", listening_fn), ("on_listening_user", c_void_p),
                ("cors_origins", c_char_p), ("embeddings", c_bool), ("pooling", c_int), ("n_gpu_layers", c_int32),
                ("gpu_device", c_char_p)]


class rp_embedder_params(Structure):
    _fields_ = [("pooling", c_int), ("normalize", c_bool), ("n_ctx", c_int32), ("n_batch", c_int32),
                ("n_seq", c_int32), ("n_threads", c_int), ("kv_type", c_int)]


class rp_agents_fill(Structure):
    _fields_ = [(n, c_int32) for n in ("filled", "reused_prefix", "reused_prefix_exact", "reused_nonprefix",
                                       "recomputed", "exact_head")] + \
               [("commit_after", c_bool), ("commit_exact", c_bool), ("fill_status", c_int), ("cache_status", c_int)]


class rp_agents_step_info(Structure):
    _fields_ = [(n, c_bool) for n in ("ran", "blocked", "idle")] + \
               [(n, c_int32) for n in ("rows", "prefill_rows", "decoding", "drafted", "accepted", "generated",
                                       "active", "waiting")] + \
               [(n, c_double) for n in ("draft_s", "target_s", "total_s")] + [("step", c_int64)]


cache_list_fn = CFUNCTYPE(c_bool, c_void_p, POINTER(rp_cache_entry))
cache_models_fn = CFUNCTYPE(c_bool, c_void_p, POINTER(rp_cache_model))
cache_bad_fn = CFUNCTYPE(None, c_void_p, c_uint64, c_char_p)

# benchmark support
class rp_model_perf(Structure):
    _fields_ = [("main_type", c_char_p), ("cpu_level", c_char_p), ("decode_bytes_per_token", c_double)]


#: every struct above, for the layout test
STRUCTS = [rp_logit_bias, rp_sampler_params, rp_model_params, rp_model_desc, rp_grammar_stats, rp_chat_message,
           rp_engine_params, rp_static_shapes, rp_engine_stats, rp_gen_opts, rp_gen_stats, rp_agents_params, rp_turn_opts,
           rp_agent_info, rp_agents_stats, rp_cache_info, rp_cache_model, rp_cache_entry, rp_plan_chunk,
           rp_plan_segment, rp_plan_call, rp_plan_desc, rp_calibrate_params, rp_calibration, rp_model_synth_params,
           rp_model_file_desc, rp_meta_entry, rp_tensor_desc, rp_type_share, rp_cpu_desc, rp_kernel_desc,
           rp_gpu_mem_type, rp_gpu_desc,
           rp_model_perf, rp_tool_call, rp_server_params, rp_agents_step_info, rp_agents_fill, rp_reasoning_span,
           rp_chat_vars, rp_embedder_params]

# ---------------------------------------------------------------------------------------------------------
# functions: name -> (restype, argtypes)
# ---------------------------------------------------------------------------------------------------------
H = c_void_p           # an opaque handle
OUT_H = POINTER(c_void_p)
P_TOK = POINTER(c_token)
P_I32 = POINTER(c_int32)
P_U64 = POINTER(c_uint64)
P_SIZE = POINTER(c_size_t)
ST = c_int             # rp_status

PROTOTYPES = {
    "rp_strerror": (c_char_p, [c_int]),
    "rp_last_error": (c_char_p, []),
    "rp_version": (c_char_p, []),
    "rp_sampler_default_params": (rp_sampler_params, []),
    "rp_kv_type_parse": (c_int, [c_char_p]),
    "rp_kv_type_name": (c_char_p, [c_int]),
    "rp_reuse_mode_parse": (c_int, [c_char_p]),
    "rp_reuse_mode_name": (c_char_p, [c_int]),
    "rp_select_kind_parse": (c_int, [c_char_p]),
    "rp_select_kind_name": (c_char_p, [c_int]),
    "rp_cpu_select": (ST, [c_char_p]),
    "rp_cpu_active": (c_char_p, []),
    "rp_system_info": (c_size_t, [c_char_p, c_size_t]),
    # model
    "rp_model_default_params": (rp_model_params, []),
    "rp_model_load": (ST, [c_char_p, rp_model_params, OUT_H]),
    "rp_model_free": (None, [H]),
    "rp_model_describe": (rp_model_desc, [H]),
    "rp_model_gpu_layers": (c_int32, [H]),
    "rp_model_gpu_notice": (c_char_p, [H]),
    "rp_model_meta": (c_long, [H, c_char_p, c_char_p, c_size_t]),
    "rp_tokenize": (ST, [H, c_char_p, c_size_t, c_bool, c_bool, P_TOK, c_int32, P_I32]),
    "rp_token_to_piece": (c_int32, [H, c_token, c_bool, c_char_p, c_int32]),
    "rp_detokenize": (ST, [H, P_TOK, c_int32, c_bool, c_char_p, c_size_t, P_SIZE]),
    "rp_token_bos": (c_token, [H]),
    "rp_token_eos": (c_token, [H]),
    "rp_token_eot": (c_token, [H]),
    "rp_token_is_eog": (c_bool, [H, c_token]),
    "rp_chat_render": (ST, [H, POINTER(rp_chat_message), c_int32, c_char_p, c_bool, c_char_p, c_size_t, P_SIZE]),
    "rp_chat_template_set": (ST, [H, c_char_p]),
    "rp_chat_template_check": (ST, [H]),
    "rp_chat_template_name": (c_char_p, [H]),
    "rp_chat_template_shows_tools": (c_bool, [H]),
    # prompt
    "rp_prompt_create": (ST, [OUT_H]),
    "rp_prompt_free": (None, [H]),
    "rp_prompt_clear": (None, [H]),
    "rp_prompt_add_text": (ST, [H, H, c_char_p, c_size_t]),
    "rp_prompt_add_tokens": (ST, [H, P_TOK, c_int32, c_bool]),
    "rp_prompt_split_at": (ST, [H, H, c_char_p]),
    "rp_prompt_n_tokens": (c_int32, [H]),
    "rp_prompt_tokens": (P_TOK, [H]),
    "rp_prompt_n_bounds": (c_int32, [H]),
    "rp_prompt_bounds": (P_I32, [H]),
    "rp_prompt_n_segments": (c_int32, [H]),
    # engine
    "rp_engine_default_params": (rp_engine_params, []),
    "rp_engine_create": (ST, [H, POINTER(rp_engine_params), OUT_H]),
    "rp_engine_free": (None, [H]),
    "rp_engine_notice": (c_char_p, [H]),
    "rp_engine_n_ctx": (c_int32, [H]),
    "rp_engine_calibrated": (c_bool, [H]),
    "rp_engine_static_shapes": (None, [H, POINTER(rp_static_shapes)]),
    "rp_engine_flush": (ST, [H]),
    "rp_engine_stats_get": (None, [H, POINTER(rp_engine_stats)]),
    # sequences
    "rp_seq_create": (ST, [H, OUT_H]),
    "rp_seq_free": (None, [H]),
    "rp_seq_reset": (None, [H]),
    "rp_seq_n_past": (c_int32, [H]),
    "rp_seq_tokens": (P_TOK, [H]),
    "rp_seq_truncate": (ST, [H, c_int32]),
    "rp_seq_fork": (ST, [H, H]),
    "rp_seq_logits": (POINTER(c_float), [H]),
    "rp_logprobs": (ST, [POINTER(c_float), c_int32, c_token, c_int32, POINTER(c_float), POINTER(c_token),
                         POINTER(c_float)]),
    "rp_gen_default_opts": (rp_gen_opts, []),
    "rp_gen_stats_json": (c_size_t, [POINTER(rp_gen_stats), c_char_p, c_size_t]),
    "rp_seq_prefill": (ST, [H, H, POINTER(rp_gen_opts), POINTER(rp_gen_stats)]),
    "rp_seq_feed": (ST, [H, P_TOK, c_int32]),
    "rp_seq_commit": (ST, [H]),
    "rp_seq_generate": (ST, [H, POINTER(rp_gen_opts), c_char_p, c_size_t, P_SIZE, POINTER(rp_gen_stats)]),
    # grammars (constrained decoding); rp_grammar_schema_to_gbnf's text is malloc'd (the caller frees it)
    "rp_grammar_parse": (ST, [c_char_p, c_char_p, OUT_H]),
    "rp_grammar_free": (None, [H]),
    "rp_grammar_schema_to_gbnf": (ST, [c_char_p, OUT_H]),
    "rp_grammar_from_json_schema": (ST, [c_char_p, OUT_H]),
    "rp_grammar_vocab_new": (ST, [H, OUT_H]),
    "rp_grammar_vocab_free": (None, [H]),
    "rp_grammar_state_new": (ST, [H, H, OUT_H]),
    "rp_grammar_state_reset": (ST, [H]),
    "rp_grammar_state_free": (None, [H]),
    "rp_grammar_accept_bytes": (ST, [H, c_char_p, c_size_t]),
    "rp_grammar_accept_token": (ST, [H, c_token]),
    "rp_grammar_can_end": (c_bool, [H]),
    "rp_grammar_mask": (ST, [H, POINTER(c_float), c_int32]),
    "rp_grammar_on_logits": (None, [c_void_p, POINTER(c_token), c_int32, POINTER(c_float), c_int32]),
    "rp_grammar_allows": (c_bool, [H, c_token]),
    "rp_grammar_accepts_prefix": (c_int32, [H, POINTER(c_token), c_int32]),
    "rp_grammar_follow": (None, [H, POINTER(c_token), c_int32]),
    "rp_grammar_vocab_set_cache_bytes": (None, [H, c_size_t]),
    "rp_grammar_vocab_stats": (None, [H, POINTER(rp_grammar_stats)]),
    "rp_grammar_vocab_stats_reset": (None, [H]),
    # agents
    "rp_agents_default_params": (rp_agents_params, []),
    "rp_agents_create": (ST, [H, POINTER(rp_agents_params), OUT_H]),
    "rp_agents_free": (None, [H]),
    "rp_agents_add": (ST, [H, POINTER(c_int64)]),
    "rp_agents_remove": (ST, [H, c_int64]),
    "rp_turn_default_opts": (rp_turn_opts, []),
    "rp_agents_submit": (ST, [H, c_int64, P_TOK, c_int32, POINTER(rp_turn_opts)]),
    "rp_agents_resume": (ST, [H, c_int64, P_TOK, c_int32, POINTER(rp_turn_opts)]),
    "rp_agents_cancel": (None, [H, c_int64]),
    "rp_agents_step": (ST, [H, POINTER(c_bool)]),
    "rp_agents_run": (ST, [H]),
    "rp_agents_info": (ST, [H, c_int64, POINTER(rp_agent_info)]),
    "rp_agents_tokens": (ST, [H, c_int64, c_int32, P_TOK, c_int32, P_I32]),
    "rp_agents_stats_get": (None, [H, POINTER(rp_agents_stats)]),
    # cache directory
    "rp_cache_open": (ST, [c_char_p, c_bool, OUT_H]),
    "rp_cache_add_filler": (ST, [c_char_p, c_bool, c_int64, c_uint64]),
    "rp_cache_close": (None, [H]),
    "rp_cache_bind": (ST, [H, H, c_int]),
    "rp_cache_info_get": (ST, [H, POINTER(rp_cache_info)]),
    "rp_cache_is_empty": (c_bool, [H]),
    "rp_cache_disk_bytes": (c_uint64, [H]),
    "rp_cache_salt": (ST, [H, c_int, P_U64]),
    "rp_cache_models": (ST, [H, cache_models_fn, c_void_p]),
    "rp_cache_list": (ST, [H, cache_list_fn, c_void_p]),
    "rp_cache_verify": (ST, [H, c_bool, cache_bad_fn, c_void_p, POINTER(c_bool), c_char_p, c_size_t, P_U64, P_U64]),
    "rp_cache_evict": (ST, [H, c_uint64, c_bool, P_I32, P_U64]),
    "rp_cache_compact": (ST, [H, P_U64]),
    "rp_cache_clear": (ST, [H, P_U64]),
    # analysis, calibration, model files
    "rp_chunk_label_name": (c_char_p, [c_int]),
    "rp_engine_plan": (ST, [H, H, POINTER(rp_gen_opts), OUT_H]),
    "rp_plan_free": (None, [H]),
    "rp_plan_describe": (rp_plan_desc, [H]),
    "rp_calibrate_default_params": (rp_calibrate_params, []),
    "rp_calibrate": (ST, [H, POINTER(rp_engine_params), POINTER(rp_calibrate_params), POINTER(rp_calibration)]),
    "rp_calibration_save": (ST, [H, POINTER(rp_calibration), c_char_p, c_char_p, c_size_t]),
    "rp_static_default_shapes": (rp_static_shapes, []),
    "rp_calibration_lookup": (c_bool, [H, c_char_p, c_int, POINTER(rp_static_shapes)]),
    "rp_model_synth_default_params": (rp_model_synth_params, []),
    "rp_model_synth": (ST, [POINTER(rp_model_synth_params), c_char_p]),
    "rp_model_file_open": (ST, [c_char_p, OUT_H]),
    "rp_model_file_close": (None, [H]),
    "rp_model_file_describe": (rp_model_file_desc, [H]),
    "rp_model_file_meta": (ST, [H, c_int64, POINTER(rp_meta_entry)]),
    "rp_model_file_find_meta": (c_int64, [H, c_char_p]),
    "rp_model_file_meta_text": (ST, [H, c_int64, c_char_p, c_size_t]),
    "rp_model_file_tensor": (ST, [H, c_int64, POINTER(rp_tensor_desc)]),
    "rp_model_file_type_mix": (c_int32, [H, POINTER(rp_type_share), c_int32]),
    "rp_cpu_describe": (None, [POINTER(rp_cpu_desc)]),
    "rp_kernel_table": (c_int32, [POINTER(rp_kernel_desc), c_int32]),
    "rp_gpu_list": (ST, [POINTER(rp_gpu_desc), c_int32, P_I32]),
    # benchmark support
    "rp_model_perf_get": (None, [H, POINTER(rp_model_perf)]),
    "rp_seq_sample": (ST, [H, POINTER(rp_sampler_params), P_TOK]),
    # long contexts
    "rp_kv_estimate": (ST, [H, c_int32, c_int, P_U64]),
    "rp_kv_estimate_ex": (ST, [H, c_int32, c_int, c_int32, c_bool, P_U64]),
    "rp_engine_kv_bytes": (c_uint64, [H]),
    "rp_system_mem_available": (c_uint64, []),
    "rp_seq_shift": (ST, [H, c_int32, c_int32]),
    # server support
    "rp_seq_n_exact": (c_int32, [H]),
    "rp_kv_bytes_per_token": (c_uint64, [H, c_int]),
    "rp_chat_format_name": (c_char_p, [c_int]),
    "rp_model_chat_format": (c_int, [H]),
    "rp_chat_render_format": (ST, [c_int, POINTER(rp_chat_message), c_int32, c_char_p, c_bool, c_char_p, c_size_t,
                                   P_SIZE]),
    "rp_chat_parse_tool_calls": (ST, [c_int, c_char_p, POINTER(POINTER(rp_tool_call)), P_SIZE, POINTER(c_void_p)]),
    "rp_tool_calls_free": (None, [POINTER(rp_tool_call), c_size_t]),
    "rp_tool_call_check": (ST, [c_char_p, POINTER(rp_tool_call), c_char_p, c_size_t]),
    "rp_chat_reasoning_span": (None, [c_char_p, c_size_t, c_bool, c_bool, POINTER(rp_reasoning_span)]),
    "rp_chat_split_reasoning": (ST, [c_char_p, c_bool, POINTER(c_void_p), POINTER(c_void_p)]),
    "rp_chat_prompt_opens_thinking": (c_bool, [c_char_p, c_size_t]),
    "rp_chat_render_vars": (ST, [H, POINTER(rp_chat_message), c_int32, c_char_p, c_bool, POINTER(rp_chat_vars),
                                 c_char_p, c_size_t, P_SIZE]),
    "rp_detokenizer_create": (ST, [H, c_bool, c_bool, OUT_H]),
    "rp_detokenizer_free": (None, [H]),
    "rp_detokenizer_push": (c_int32, [H, c_token, c_char_p, c_int32]),
    "rp_detokenizer_flush": (c_int32, [H, c_char_p, c_int32]),
    "rp_detokenizer_bound": (c_int32, [H]),
    "rp_agents_truncate": (ST, [H, c_int64, c_int32]),
    "rp_agents_fork": (ST, [H, c_int64, c_int64, c_int32]),
    "rp_agents_suspend": (ST, [H, c_int64]),
    "rp_agents_wait": (c_bool, [H, c_double]),
    "rp_agents_wake": (None, [H]),
    "rp_agents_last_step": (None, [H, POINTER(rp_agents_step_info)]),
    "rp_agents_submit_reuse": (ST, [H, c_int64, H, H, POINTER(rp_gen_opts), POINTER(rp_turn_opts),
                                    POINTER(rp_agents_fill)]),
    "rp_agents_commit_prompt": (ST, [H, c_int64, H, H, POINTER(rp_gen_opts), c_bool]),
    # embeddings
    "rp_pooling_parse": (c_int, [c_char_p]),
    "rp_pooling_name": (c_char_p, [c_int]),
    "rp_model_pooling": (c_int, [H]),
    "rp_embedder_default_params": (rp_embedder_params, []),
    "rp_embedder_create": (ST, [H, POINTER(rp_embedder_params), OUT_H]),
    "rp_embedder_free": (None, [H]),
    "rp_embedder_n_embd": (c_int32, [H]),
    "rp_embedder_n_ctx": (c_int32, [H]),
    "rp_embedder_pooling": (c_int, [H]),
    "rp_embed_tokenize": (ST, [H, c_char_p, c_size_t, P_TOK, c_int32, P_I32]),
    "rp_embed": (ST, [H, POINTER(P_TOK), P_I32, c_int32, POINTER(c_float), c_size_t, P_SIZE]),
    "rp_server_default_params": (rp_server_params, []),
    "rp_server_create": (ST, [POINTER(rp_server_params), OUT_H]),
    "rp_server_parallel": (c_int, [H]),
    "rp_server_port": (c_uint16, [H]),
    "rp_server_n_keys": (c_int, [H]),
    "rp_server_cache_per_key": (c_bool, [H]),
    "rp_server_backend_kind": (c_char_p, [H]),
    "rp_server_n_ctx": (c_int32, [H]),
    "rp_server_drain": (None, [H, c_double]),
    "rp_server_free": (None, [H]),
}


def _declare():
    missing = []
    for name, (res, args) in PROTOTYPES.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        f.restype = res
        f.argtypes = args
    if missing:
        raise LibraryNotFound("reprise: %s (found by %s) lacks %s: a library older than this package"
                              % (path, found_by, ", ".join(missing)))
    ver = lib.rp_version().decode()
    major = ver.split(".")[0]
    if major != str(ABI_MAJOR):
        raise LibraryNotFound("reprise: %s (found by %s) is version %s; this package is written for %d.x"
                              % (path, found_by, ver, ABI_MAJOR))


_declare()


def token_array(tokens):
    """A ctypes array of the tokens (a list, a tuple, or anything iterable of ints), and its length."""
    t = list(tokens)
    return (c_token * len(t))(*t), len(t)


def string_array(strings):
    """A char** of UTF-8 copies of strings (kept alive by the returned array object), and its length."""
    b = [s.encode() if isinstance(s, str) else bytes(s) for s in strings]
    arr = (c_char_p * max(len(b), 1))(*b)
    return arr, len(b)
