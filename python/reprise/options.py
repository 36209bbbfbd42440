"""options.py — per-call options given as keyword arguments, turned into rp_gen_opts / rp_turn_opts.

Sampling (both): temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, presence_penalty,
frequency_penalty, seed, logit_bias ({token: bias}, -math.inf bans a token).
Generation (Sequence / Engine calls): max_tokens (None or < 0: until end-of-generation or a full context), stop
(a string or a list of them), ignore_eos, reuse ("none" | "prefix" | "full" | "blend"), recompute_ratio, select
("hybrid" | "dev" | "attn"), static (bool), cache_namespace (an int, or a str hashed to one), persist.
Agent turns: max_tokens, stop, suspend_on_tool_call, wait_after, ignore_eos (end-of-generation tokens never
sampled, llama-server's meaning; Generation's ignore_eos samples them and goes on past them).
Anything left out keeps the library's default (rp_gen_default_opts / rp_turn_default_opts); an unknown name is a
TypeError that says which names exist.
"""
from __future__ import annotations

import difflib
import hashlib

from . import _lib
from .enums import Reuse, Select, parse

lib = _lib.lib

SAMPLING = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "presence_penalty",
            "frequency_penalty", "seed", "logit_bias")
GEN = SAMPLING + ("max_tokens", "stop", "ignore_eos", "reuse", "recompute_ratio", "select", "static",
                  "cache_namespace", "persist")
TURN = SAMPLING + ("max_tokens", "stop", "suspend_on_tool_call", "wait_after", "ignore_eos")


def check_names(kw: dict, known, where: str) -> None:
    for k in kw:
        if k not in known:
            close = difflib.get_close_matches(k, known, n=1)
            hint = " (did you mean %r?)" % close[0] if close else ""
            raise TypeError("%s: unknown option %r%s; options: %s" % (where, k, hint, ", ".join(known)))


def namespace_id(ns) -> int:
    """cache_namespace as the library's u64: an int as is, a str as its 64-bit BLAKE2b digest (never 0)."""
    if isinstance(ns, str):
        v = int.from_bytes(hashlib.blake2b(ns.encode(), digest_size=8).digest(), "little")
        return v or 1
    v = int(ns)
    if not 0 <= v < 1 << 64:
        raise ValueError("cache_namespace %d is not a 64-bit unsigned number" % v)
    return v


def _sampling(sp, kw: dict, keep: list) -> None:
    names = {"temperature": "temp", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
             "repeat_penalty": "repeat_penalty", "repeat_last_n": "repeat_last_n",
             "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty", "seed": "seed"}
    for k, field in names.items():
        v = kw.get(k)
        if v is not None:
            setattr(sp, field, v)
    bias = kw.get("logit_bias")
    if bias:
        items = list(bias.items())
        arr = (_lib.rp_logit_bias * len(items))(*[_lib.rp_logit_bias(int(t), float(b)) for t, b in items])
        keep.append(arr)
        sp.bias = arr
        sp.n_bias = len(items)


def _stops(o, kw: dict, keep: list) -> None:
    stop = kw.get("stop")
    if stop is None:
        return
    if isinstance(stop, (str, bytes)):
        stop = [stop]
    arr, n = _lib.string_array(stop)
    keep.append(arr)
    o.stop = arr
    o.n_stop = n


def gen_opts(kw: dict, where: str = "generate"):
    """(rp_gen_opts, what it points at): keep the second alive as long as the first is used."""
    check_names(kw, GEN, where)
    o = lib.rp_gen_default_opts()
    keep: list = []
    _sampling(o.sampling, kw, keep)
    _stops(o, kw, keep)
    if "max_tokens" in kw:
        mt = kw["max_tokens"]
        o.max_tokens = -1 if mt is None else int(mt)
    if kw.get("ignore_eos") is not None:
        o.ignore_eos = bool(kw["ignore_eos"])
    if kw.get("reuse") is not None:
        o.reuse = parse(Reuse, kw["reuse"], "reuse")
    if kw.get("recompute_ratio") is not None:
        o.recompute_ratio = float(kw["recompute_ratio"])
    if kw.get("select") is not None:
        o.select = parse(Select, kw["select"], "select")
    if kw.get("static") is not None:
        o.static_mode = 1 if kw["static"] else 0
    if kw.get("cache_namespace") is not None:
        o.cache_namespace = namespace_id(kw["cache_namespace"])
    if kw.get("persist") is not None:
        o.persist = bool(kw["persist"])
    return o, keep


def turn_opts(kw: dict, where: str = "submit"):
    """(rp_turn_opts, what it points at), as gen_opts."""
    check_names(kw, TURN, where)
    o = lib.rp_turn_default_opts()
    keep: list = []
    _sampling(o.sampling, kw, keep)
    _stops(o, kw, keep)
    if "max_tokens" in kw:
        mt = kw["max_tokens"]
        o.max_tokens = -1 if mt is None else int(mt)
    if kw.get("suspend_on_tool_call") is not None:
        o.suspend_on_tool_call = bool(kw["suspend_on_tool_call"])
    if kw.get("wait_after") is not None:
        o.wait_after = bool(kw["wait_after"])
    if kw.get("ignore_eos") is not None:   # end-of-generation tokens never sampled (llama-server's meaning)
        o.ignore_eos = bool(kw["ignore_eos"])
    return o, keep
