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
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char_p, c_double, c_float, c_int, c_int32, c_int64,
                    c_long, c_size_t, c_uint64, c_void_p)

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


class rp_logit_bias(Structure):
    _fields_ = [("token", c_token), ("bias", c_float)]


class rp_sampler_params(Structure):
    _fields_ = [("temp", c_float), ("top_k", c_int32), ("top_p", c_float), ("min_p", c_float),
                ("repeat_penalty", c_float), ("repeat_last_n", c_int32), ("presence_penalty", c_float),
                ("frequency_penalty", c_float), ("seed", c_uint64), ("bias", POINTER(rp_logit_bias)),
                ("n_bias", c_int32)]


class rp_model_params(Structure):
    _fields_ = [("vocab_only", c_bool), ("n_threads", c_int), ("cpu_level", c_int), ("progress", progress_fn),
                ("progress_user", c_void_p)]


class rp_model_desc(Structure):
    _fields_ = [("name", c_char_p), ("arch", c_char_p), ("chat_format", c_char_p), ("n_vocab", c_int32),
                ("n_ctx_train", c_int32), ("n_embd", c_int32), ("n_ff", c_int32), ("n_layer", c_int32),
                ("n_head", c_int32), ("n_head_kv", c_int32), ("head_dim", c_int32), ("weight_bytes", c_uint64),
                ("fingerprint", c_uint64), ("has_weights", c_bool), ("has_tokenizer", c_bool)]


class rp_chat_message(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p), ("tool_calls", c_char_p), ("tool_call_id", c_char_p),
                ("name", c_char_p)]


class rp_engine_params(Structure):
    _fields_ = [("n_threads", c_int), ("n_ctx", c_int32), ("n_batch", c_int32), ("kv_type", c_int),
                ("reuse", c_int), ("recompute_ratio", c_float), ("select", c_int), ("check_layer", c_int32),
                ("static_mode", c_bool), ("naive_schedule", c_bool), ("cache_ram_bytes", c_size_t),
                ("cache_dir", c_char_p), ("cache_disk_bytes", c_uint64), ("cache_dir_optional", c_bool),
                ("load_calibration", c_bool)]


class rp_static_shapes(Structure):
    _fields_ = [("L_P", c_int32), ("L_S", c_int32), ("lat_P_ms", c_double), ("lat_S_ms", c_double),
                ("calibrated", c_bool)]


class rp_engine_stats(Structure):
    _fields_ = [(n, c_uint64) for n in ("cache_chunks", "cache_bytes", "inserts", "evictions", "prefix_hits",
                                        "content_hits", "misses", "flash_hits", "loads", "load_failures",
                                        "prefetched", "prefetch_used", "written", "write_failures")] + \
               [("has_store", c_bool), ("store_bytes", c_uint64), ("store_damaged", c_bool)]


class rp_gen_opts(Structure):
    _fields_ = [("sampling", rp_sampler_params), ("max_tokens", c_int32), ("ignore_eos", c_bool),
                ("stop", POINTER(c_char_p)), ("n_stop", c_int32), ("reuse", c_int), ("recompute_ratio", c_float),
                ("select", c_int), ("static_mode", c_int), ("cache_namespace", c_uint64), ("persist", c_bool),
                ("on_token", token_fn), ("user", c_void_p)]


class rp_gen_stats(Structure):
    _fields_ = [(n, c_int32) for n in ("prompt_tokens", "reused_prefix", "reused_prefix_exact",
                                       "reused_nonprefix", "recomputed", "computed", "load_failed", "generated")] + \
               [(n, c_double) for n in ("ttft_ms", "prefill_ms", "decode_ms", "prompt_tok_per_s",
                                        "gen_tok_per_s")] + \
               [("stop", c_int)] + \
               [(n, c_int32) for n in ("chunks", "subchunk", "computed_rows", "calls", "pad_rows", "attempts")] + \
               [(n, c_double) for n in ("match_ms", "load_ms", "load_exposed_ms", "compute_ms", "plan_ms")] + \
               [("bytes_loaded", c_uint64), ("static_shapes", c_bool), ("calibrated", c_bool),
                ("commit_status", c_int)]


class rp_agents_params(Structure):
    _fields_ = [("max_agents", c_int32), ("max_active", c_int32), ("n_ctx", c_int32), ("n_batch", c_int32),
                ("kv_type", c_int), ("n_threads", c_int), ("policy", c_int), ("draft", c_void_p)]


class rp_turn_opts(Structure):
    _fields_ = [("sampling", rp_sampler_params), ("max_tokens", c_int32), ("stop", POINTER(c_char_p)),
                ("n_stop", c_int32), ("suspend_on_tool_call", c_bool), ("wait_after", c_bool),
                ("on_token", agent_token_fn), ("user", c_void_p)]


class rp_agent_info(Structure):
    _fields_ = [("state", c_int), ("n_tokens", c_int32), ("generated", c_int32), ("drafted", c_uint64),
                ("accepted", c_uint64), ("stop", c_int)]


class rp_agents_stats(Structure):
    _fields_ = [(n, c_uint64) for n in ("steps", "rows", "generated", "drafted", "accepted")] + \
               [(n, c_int32) for n in ("agents", "active", "waiting")]


class rp_cache_info(Structure):
    _fields_ = [(n, c_uint64) for n in ("chunks", "corrupt", "files", "blobs", "raw_bytes", "stored_bytes",
                                        "disk_bytes", "keywords", "vectors", "write_failures")] + \
               [("models", c_int32)]


class rp_cache_entry(Structure):
    _fields_ = [("id", c_uint64), ("parent", c_uint64), ("model", c_int64), ("n_tokens", c_int32),
                ("pos0", c_int32), ("exact", c_bool), ("in_file", c_bool), ("compressed", c_bool),
                ("raw_bytes", c_uint64), ("stored_bytes", c_uint64), ("hits", c_uint64), ("last_used", c_uint64),
                ("used_at", c_double), ("tokens", POINTER(c_token))]


class rp_cache_model(Structure):
    _fields_ = [("id", c_int64), ("salt", c_uint64), ("name", c_char_p), ("kv_type", c_int), ("n_layer", c_int32),
                ("row_bytes", c_uint64), ("chunks", c_uint64), ("bytes", c_uint64)]


cache_list_fn = CFUNCTYPE(c_bool, c_void_p, POINTER(rp_cache_entry))
cache_models_fn = CFUNCTYPE(c_bool, c_void_p, POINTER(rp_cache_model))
cache_bad_fn = CFUNCTYPE(None, c_void_p, c_uint64, c_char_p)

#: every struct above, for the layout test
STRUCTS = [rp_logit_bias, rp_sampler_params, rp_model_params, rp_model_desc, rp_chat_message, rp_engine_params,
           rp_static_shapes, rp_engine_stats, rp_gen_opts, rp_gen_stats, rp_agents_params, rp_turn_opts,
           rp_agent_info, rp_agents_stats, rp_cache_info, rp_cache_model, rp_cache_entry]

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
    "rp_seq_logits": (POINTER(c_float), [H]),
    "rp_gen_default_opts": (rp_gen_opts, []),
    "rp_gen_stats_json": (c_size_t, [POINTER(rp_gen_stats), c_char_p, c_size_t]),
    "rp_seq_prefill": (ST, [H, H, POINTER(rp_gen_opts), POINTER(rp_gen_stats)]),
    "rp_seq_feed": (ST, [H, P_TOK, c_int32]),
    "rp_seq_commit": (ST, [H]),
    "rp_seq_generate": (ST, [H, POINTER(rp_gen_opts), c_char_p, c_size_t, P_SIZE, POINTER(rp_gen_stats)]),
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
