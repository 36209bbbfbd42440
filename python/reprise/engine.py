"""engine.py — reprise.Engine (serving one model: context, reuse engine, chunk cache, store) and reprise.Sequence
(a conversation: prefill, feed, commit, generate, stream, chat)."""
from __future__ import annotations

import array
import contextlib
import ctypes
import os
import threading
from typing import Iterable, NamedTuple, Optional, Sequence as Seq, Union

from . import _lib, chat as _chat, options
from ._callbacks import Sink
from ._gate import Gate
from ._handle import Handle
from .enums import KVType, Reuse, Select, Status, parse
from .errors import Error, check
from .prompt import Prompt
from .stats import EngineStats, GenStats, from_struct
from .stream import Stream

lib = _lib.lib
PromptLike = Union[None, str, bytes, Prompt, Iterable[int]]


class Generation(NamedTuple):
    """What generate / chat return: the text and the call's figures (text, stats = seq.generate(...))."""
    text: str
    stats: GenStats


class Engine(Handle):
    """Serving one model: Engine(model, n_threads=2, n_ctx=0, n_batch=512, kv_type="f16", reuse="blend",
    recompute_ratio=0.25, select="hybrid", check_layer=1, static=False, cache_ram_bytes=512 MiB, cache_dir=None,
    cache_disk_bytes=0, load_calibration=True, swa_full=False). Left out, a parameter keeps the library's default
    (rp_engine_default_params). n_ctx 0: min(4096, the model's training context). cache_dir: the persistent chunk
    store (created when missing), refused when not the user's or group/world-writable.

    One thread at a time: the package serializes calls on an engine and its sequences (a call from another
    thread waits). generate / stream / chat / prefill here use a sequence of the engine's own."""

    _free = lib.rp_engine_free
    _what = "engine"

    def __init__(self, model, *, n_threads: Optional[int] = None, n_ctx: Optional[int] = None,
                 n_batch: Optional[int] = None, kv_type=None, reuse=None, recompute_ratio: Optional[float] = None,
                 select=None, check_layer: Optional[int] = None, static: Optional[bool] = None,
                 cache_ram_bytes: Optional[int] = None, cache_dir: Union[None, str, os.PathLike] = None,
                 cache_disk_bytes: Optional[int] = None, load_calibration: Optional[bool] = None,
                 swa_full: Optional[bool] = None):
        self._ptr = None
        p = lib.rp_engine_default_params()
        for name, v in (("n_threads", n_threads), ("n_ctx", n_ctx), ("n_batch", n_batch),
                        ("check_layer", check_layer), ("cache_ram_bytes", cache_ram_bytes),
                        ("cache_disk_bytes", cache_disk_bytes)):
            if v is not None:
                setattr(p, name, int(v))
        if kv_type is not None:
            p.kv_type = parse(KVType, kv_type, "kv_type")
        if reuse is not None:
            p.reuse = parse(Reuse, reuse, "reuse")
        if select is not None:
            p.select = parse(Select, select, "select")
        if recompute_ratio is not None:
            p.recompute_ratio = float(recompute_ratio)
        if static is not None:
            p.static_mode = bool(static)
        if load_calibration is not None:
            p.load_calibration = bool(load_calibration)
        if swa_full is not None:   # sliding-window layers keep every cell (Gemma 2 / 3; as llama.cpp's --swa-full)
            p.swa_full = bool(swa_full)
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else None
        p.cache_dir = os.fsencode(self.cache_dir) if self.cache_dir is not None else None
        out = ctypes.c_void_p()
        check(lib.rp_engine_create(model._h, ctypes.byref(p), ctypes.byref(out)))
        super().__init__(out.value, parent=model)
        self.model = model
        self.kv_type = KVType(p.kv_type)
        self._gate = Gate()
        self._stream = None     # a weakref to the open Stream, if any
        self._seq = None        # the sequence generate / chat use here

    def __repr__(self):
        if self.closed:
            return "<reprise.Engine (closed)>"
        return "<reprise.Engine n_ctx=%d cache_dir=%r>" % (self.n_ctx, self.cache_dir)

    @contextlib.contextmanager
    def _use(self):
        """Serializes a call on the engine. A stream this thread left open ends first (cancelled)."""
        ref = self._stream
        s = ref() if ref is not None else None
        if s is not None and s.owner == threading.get_ident():
            s.close()
        with self._gate:
            yield self._h

    def close(self) -> None:
        if self.closed:
            return
        with self._use():
            super().close()

    # ---- the engine itself ----
    @property
    def n_ctx(self) -> int:
        """Tokens a sequence holds."""
        return lib.rp_engine_n_ctx(self._h)

    @property
    def calibrated(self) -> bool:
        """Static mode: whether a stored calibration set the call shapes."""
        return bool(lib.rp_engine_calibrated(self._h))

    @property
    def notice(self) -> str:
        """What opening the store did that a user should hear (e.g. a damaged database set aside), or ""."""
        return lib.rp_engine_notice(self._h).decode(errors="replace")

    def stats(self) -> EngineStats:
        """The chunk cache and its store (callable from any thread, also while a call runs)."""
        s = _lib.rp_engine_stats()
        lib.rp_engine_stats_get(self._h, ctypes.byref(s))
        return from_struct(EngineStats, s)

    def flush(self) -> None:
        """Waits until everything cached so far is on flash (nothing to do without a cache_dir)."""
        with self._use() as h:
            check(lib.rp_engine_flush(h))

    def sequence(self) -> "Sequence":
        """A new sequence (conversation) with a KV cache of n_ctx cells."""
        return Sequence(self)

    def _own_seq(self) -> "Sequence":
        if self._seq is None or self._seq.closed:
            self._seq = Sequence(self, _weak=True)
        return self._seq

    # ---- conveniences on the engine's own sequence ----
    def prefill(self, prompt: PromptLike, **kw) -> GenStats:
        return self._own_seq().prefill(prompt, **kw)

    def generate(self, prompt: PromptLike = None, **kw) -> Generation:
        return self._own_seq().generate(prompt, **kw)

    def stream(self, prompt: PromptLike = None, **kw) -> Stream:
        return self._own_seq().stream(prompt, **kw)

    def chat(self, messages, tools=None, **kw):
        return self._own_seq().chat(messages, tools, **kw)


class Sequence(Handle):
    """A sequence (conversation) of an engine: its KV cache and tokens. Sequence(engine) or engine.sequence().

    Prompts: a str (one segment), a Prompt, or token ids; documents=[...] puts each document before the prompt
    as a segment of its own (reused wherever it sits in a later prompt); separator also cuts chunks at each of
    its occurrences. Per-call options are keyword arguments (see reprise.options): temperature, top_k, top_p,
    min_p, penalties, seed, logit_bias, max_tokens, stop, ignore_eos, reuse, recompute_ratio, select, static,
    cache_namespace, persist."""

    _free = lib.rp_seq_free
    _what = "sequence"

    def __init__(self, engine: Engine, _weak: bool = False):
        self._ptr = None
        out = ctypes.c_void_p()
        with engine._use() as h:
            check(lib.rp_seq_create(h, ctypes.byref(out)))
        super().__init__(out.value, parent=engine, weak_parent=_weak)
        self.model = engine.model
        self._stream = None

    @property
    def engine(self) -> Engine:
        e = self._parent_ref()
        if e is None:   # only the engine's own sequence holds it weakly, and the engine closes it first
            raise Error(Status.INVALID_ARG, "sequence: its engine is gone")
        return e

    def __repr__(self):
        return "<reprise.Sequence (closed)>" if self.closed else "<reprise.Sequence n_past=%d>" % self.n_past

    def _before_free(self):
        ref = self._stream
        s = ref() if ref is not None else None
        if s is not None:
            s.close()

    def close(self) -> None:
        if self.closed:
            return
        with self.engine._use():
            super().close()

    # ---- state ----
    @property
    def n_past(self) -> int:
        """Tokens in the KV cache."""
        with self.engine._use():
            return lib.rp_seq_n_past(self._h)

    def reset(self) -> None:
        """Empty again (a new conversation)."""
        with self.engine._use():
            lib.rp_seq_reset(self._h)

    def fork(self, into: Optional["Sequence"] = None) -> "Sequence":
        """A copy of this sequence (its tokens, KV cells and last logits; rp_seq_fork), so that several
        continuations of one prompt are generated without prefilling it again. into: a sequence of the same
        engine to overwrite (what it held is dropped), else a new one. Returns the copy."""
        eng = self.engine
        dst = into if into is not None else Sequence(eng)
        if dst.engine is not eng:
            raise Error(Status.INVALID_ARG, "sequence: fork into another engine's sequence")
        with eng._use():
            check(lib.rp_seq_fork(dst._h, self._h))
        return dst

    def logits(self) -> Optional[array.array]:
        """A copy of the last fed token's logits (n_vocab floats), or None before any."""
        with self.engine._use():
            p = lib.rp_seq_logits(self._h)
            if not p:
                return None
            n = self.model.n_vocab
            return array.array("f", ctypes.string_at(p, 4 * n))

    def logprobs(self, top: int = 5, token: Optional[int] = None):
        """Log-probabilities of the next token from the last logits (log-softmax of the raw logits, rp_logprobs):
        (the given token's log-probability or None, [(id, logprob)] of the `top` most likely, most likely first).
        None before any logits."""
        lg = self.logits()
        if lg is None:
            return None
        n = len(lg)
        buf = (ctypes.c_float * n).from_buffer(lg)
        k = min(top, n)
        ids = (_lib.c_token * max(k, 1))()
        lps = (ctypes.c_float * max(k, 1))()
        chosen = ctypes.c_float()
        check(lib.rp_logprobs(buf, n, -1 if token is None else token, k,
                              None if token is None else ctypes.byref(chosen), ids, lps))
        return (None if token is None else chosen.value), [(ids[i], lps[i]) for i in range(k)]

    # ---- prompts ----
    def _prompt(self, prompt: PromptLike, documents: Optional[Seq[str]], separator: Optional[str]):
        """(the Prompt, whether it is ours to close)."""
        if isinstance(prompt, Prompt):
            if documents or separator:
                raise TypeError("documents / separator go with a str prompt, not a Prompt (add them to it)")
            return prompt, False
        segs = list(documents or [])
        if prompt is not None and not (isinstance(prompt, (str, bytes)) and not prompt):
            segs.append(prompt)
        if not segs:
            raise TypeError("nothing to prefill: give a prompt or documents")
        return Prompt(self.model, *segs, separator=separator), True

    def _prefill(self, h, prompt: PromptLike, documents, separator, o) -> GenStats:
        p, own = self._prompt(prompt, documents, separator)
        try:
            st = _lib.rp_gen_stats()
            check(lib.rp_seq_prefill(h, p._h, ctypes.byref(o), ctypes.byref(st)))
            return GenStats._of(st)
        finally:
            if own:
                p.close()

    def prefill(self, prompt: PromptLike, *, documents: Optional[Seq[str]] = None, separator: Optional[str] = None,
                **kw) -> GenStats:
        """Replaces the sequence's content with the prompt, reusing cached KV as the options say. Its chunks are
        cached at the first generated token, or by commit()."""
        o, _keep = options.gen_opts(kw, "prefill")
        with self.engine._use():
            return self._prefill(self._h, prompt, documents, separator, o)

    def feed(self, tokens: Union[str, bytes, Iterable[int]]) -> None:
        """Appends tokens (a next user turn, a tool result) to the sequence; text is tokenized with control
        tokens parsed (and BOS when the sequence is empty and the vocabulary wants one)."""
        with self.engine._use():
            if isinstance(tokens, (str, bytes)):
                tokens = self.model.tokenize(tokens, add_bos=lib.rp_seq_n_past(self._h) == 0, parse_special=True)
            arr, n = _lib.token_array(tokens)
            check(lib.rp_seq_feed(self._h, arr, n))

    def commit(self) -> None:
        """Caches the last prefilled prompt's chunks now (a no-op when already done)."""
        with self.engine._use():
            check(lib.rp_seq_commit(self._h))

    # ---- generation ----
    def generate(self, prompt: PromptLike = None, *, documents: Optional[Seq[str]] = None,
                 separator: Optional[str] = None, **kw) -> Generation:
        """Prefills the prompt (when one is given; else continues the sequence) and generates: (text, stats).
        A KeyboardInterrupt (or any exception) during the generation stops it and is raised."""
        o, keep = options.gen_opts(kw, "generate")
        pieces = []
        sink = Sink()

        def on_token(_user, _tok, text, n):
            if n:
                pieces.append(ctypes.string_at(text, n))
            return True
        cb = _lib.token_fn(sink.wrap(on_token, False))   # an exception stops the generation, then comes out
        o.on_token = cb
        with self.engine._use():
            h = self._h
            if prompt is not None or documents:
                self._prefill(h, prompt, documents, separator, o)
            st = _lib.rp_gen_stats()
            n = ctypes.c_size_t()
            rc = lib.rp_seq_generate(h, ctypes.byref(o), None, 0, ctypes.byref(n), ctypes.byref(st))
        sink.reraise()
        check(rc)
        return Generation(b"".join(pieces).decode("utf-8", "replace"), GenStats._of(st))

    def stream(self, prompt: PromptLike = None, *, documents: Optional[Seq[str]] = None,
               separator: Optional[str] = None, **kw) -> Stream:
        """As generate, as an iterator over the text's pieces: `for piece in seq.stream(...)`. Breaking out of
        the loop stops the generation at that token (the stream ends, cancelled, when it is dropped or closed, or
        at this thread's next call on the engine)."""
        o, keep = options.gen_opts(kw, "stream")
        with self.engine._use():
            if prompt is not None or documents:
                self._prefill(self._h, prompt, documents, separator, o)
            return Stream(self, o, keep)

    def chat(self, messages, tools=None, *, documents: Optional[Seq[str]] = None, add_generation_prompt: bool = True,
             stream: bool = False, **kw):
        """One chat turn: messages (and tools) rendered with the model's chat template, prefilled (the
        conversation's prefix is reused from the cache), and the reply generated: a Generation, or a Stream with
        stream=True. documents go into the system message, each a segment of its own for reuse."""
        msgs = list(messages)
        if documents:
            msgs = _chat.with_documents(msgs, documents)
        text = self.model.chat_render(msgs, tools, add_generation_prompt)
        p = Prompt(self.model, *_chat.segments(text, documents))
        try:
            return self.stream(p, **kw) if stream else self.generate(p, **kw)
        finally:
            p.close()
