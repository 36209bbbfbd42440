"""embed.py — reprise.Embedder: embedding vectors of texts or token ids with the loaded model (rp_embedder)."""
from __future__ import annotations

import ctypes
import threading
from typing import Iterable, List, Optional, Union

from . import _lib
from ._handle import Handle
from .enums import KVType, Pooling, Status, member, parse
from .errors import check

lib = _lib.lib
Input = Union[str, bytes, Iterable[int]]


class Embedder(Handle):
    """Embeddings of a model: Embedder(model, pooling="model", normalize=True, n_ctx=0, n_batch=512, n_seq=4,
    n_threads=2, kv_type="f16"). Left out, a parameter keeps the library's default (rp_embedder_default_params).
    pooling: "model" (the file's <arch>.pooling_type; mean when it has none), "none" (one vector per token),
    "mean", "cls" (first token), "last". One thread at a time: calls from other threads wait."""

    _free = lib.rp_embedder_free
    _what = "embedder"

    def __init__(self, model, *, pooling=None, normalize: Optional[bool] = None, n_ctx: Optional[int] = None,
                 n_batch: Optional[int] = None, n_seq: Optional[int] = None, n_threads: Optional[int] = None,
                 kv_type=None):
        self._ptr = None
        p = lib.rp_embedder_default_params()
        for name, v in (("n_ctx", n_ctx), ("n_batch", n_batch), ("n_seq", n_seq), ("n_threads", n_threads)):
            if v is not None:
                setattr(p, name, int(v))
        if pooling is not None:
            p.pooling = parse(Pooling, pooling, "pooling")
        if normalize is not None:
            p.normalize = bool(normalize)
        if kv_type is not None:
            p.kv_type = parse(KVType, kv_type, "kv_type")
        out = ctypes.c_void_p()
        check(lib.rp_embedder_create(model._h, ctypes.byref(p), ctypes.byref(out)))
        super().__init__(out.value, parent=model)
        self.model = model
        self.normalize = bool(p.normalize)
        self._lock = threading.RLock()

    def __repr__(self):
        if self.closed:
            return "<reprise.Embedder (closed)>"
        return "<reprise.Embedder n_embd=%d pooling=%s>" % (self.n_embd, self.pooling.name.lower())

    def close(self) -> None:
        with self._lock:
            super().close()

    @property
    def n_embd(self) -> int:
        """Floats per vector."""
        return lib.rp_embedder_n_embd(self._h)

    @property
    def n_ctx(self) -> int:
        """The longest input accepted, in tokens."""
        return lib.rp_embedder_n_ctx(self._h)

    @property
    def pooling(self):
        """The pooling in use (never Pooling.MODEL)."""
        return member(Pooling, lib.rp_embedder_pooling(self._h))

    def tokenize(self, text: Union[str, bytes]) -> List[int]:
        """Token ids of text as embeddings take it (BOS / EOS when the vocabulary asks, special texts parsed)."""
        b = text.encode() if isinstance(text, str) else bytes(text)
        cap = len(b) + 8
        while True:
            out = (_lib.c_token * cap)()
            n = ctypes.c_int32()
            st = lib.rp_embed_tokenize(self.model._h, b, len(b), out, cap, ctypes.byref(n))
            if st == Status.FULL and n.value > cap:
                cap = n.value
                continue
            check(st)
            return list(out[:n.value])

    def embed(self, inputs: Union[Input, List[Input]]) -> List:
        """Vectors of one input or a list of them (each a str / bytes, tokenized with tokenize(), or token ids).
        One input: its vector (a list of n_embd floats); a list: one vector per input, in order. With pooling
        "none", each input gives a list of per-token vectors instead of one vector."""
        single = isinstance(inputs, (str, bytes)) or (
            not isinstance(inputs, (list, tuple)) or (len(inputs) > 0 and isinstance(inputs[0], int)))
        items = [inputs] if single else list(inputs)
        toks = [self.tokenize(x) if isinstance(x, (str, bytes)) else [int(t) for t in x] for x in items]
        n = len(toks)
        arrs = [(_lib.c_token * max(len(t), 1))(*t) for t in toks]
        ptrs = (_lib.P_TOK * max(n, 1))(*[ctypes.cast(a, _lib.P_TOK) for a in arrs])
        lens = (ctypes.c_int32 * max(n, 1))(*[len(t) for t in toks])
        with self._lock:
            h = self._h
            need = ctypes.c_size_t()
            st = lib.rp_embed(h, ptrs, lens, n, None, 0, ctypes.byref(need))
            if st != Status.FULL:
                check(st)
            out = (ctypes.c_float * max(need.value, 1))()
            got = ctypes.c_size_t()
            check(lib.rp_embed(h, ptrs, lens, n, out, need.value, ctypes.byref(got)))
            d = lib.rp_embedder_n_embd(h)
            none = lib.rp_embedder_pooling(h) == Pooling.NONE
        flat = list(out[:got.value])
        vecs = [flat[i:i + d] for i in range(0, len(flat), d)]
        if none:
            res, at = [], 0
            for t in toks:
                res.append(vecs[at:at + len(t)])
                at += len(t)
        else:
            res = vecs
        return res[0] if single else res
