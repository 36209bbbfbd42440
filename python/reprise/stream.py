"""stream.py — reprise.Stream: `for piece in seq.stream(...)`, over the rp_token_fn callback.

rp_seq_generate runs on a worker thread and calls back for each piece of text; the callback hands the piece to
the consumer and waits for it to ask for the next one. So the generation advances only as the loop does, and a
consumer that stops (break, an exception, close()) makes the callback return false: the generation ends at
that token with stop reason CANCELLED. The engine is held (its gate) from the stream's creation to its end."""
from __future__ import annotations

import ctypes
import queue
import threading
import weakref
from typing import List, Optional

from . import _lib
from .errors import Error, last_error
from .stats import GenStats

lib = _lib.lib
_DONE = object()


class _Channel:
    """What the worker and the consumer share (never the Stream itself: a stream dropped by its consumer must
    be collected at once, which a reference cycle through the callback would prevent)."""

    def __init__(self):
        self.out = queue.SimpleQueue()    # worker -> consumer: bytes pieces, then _DONE
        self.back = queue.SimpleQueue()   # consumer -> worker: True (go on) / False (stop)
        self.pieces: List[bytes] = []
        self.tokens: List[int] = []
        self.error: Optional[BaseException] = None


def _callback(ch: _Channel):
    def on_token(_user, tok, text, n):
        try:
            if tok >= 0:
                ch.tokens.append(tok)
            if not n:
                return True   # nothing printable yet (a possible stop string is held back)
            b = ctypes.string_at(text, n)
            ch.pieces.append(b)
            ch.out.put(b)
            return ch.back.get()
        except BaseException as e:   # noqa: B902 — handed to the consumer
            ch.error = e
            return False
    return _lib.token_fn(on_token)


def _work(h, opts, stats, ch: _Channel) -> None:
    n = ctypes.c_size_t()
    try:
        st = lib.rp_seq_generate(h, ctypes.byref(opts), None, 0, ctypes.byref(n), ctypes.byref(stats))
        if st != 0 and ch.error is None:
            ch.error = Error(st, last_error())   # rp_last_error is per thread: read here
    except BaseException as e:   # noqa: B902
        ch.error = e
    finally:
        ch.out.put(_DONE)


class Stream:
    """An iterator over the pieces (str) of one generation; made by Sequence.stream / Engine.stream / chat(...,
    stream=True). After it ends: .text (the whole text), .tokens (the generated ids), .stats (a GenStats; reading
    it ends a stream still paused, as close() does). Consume it on the thread that made it; until it ends, that
    thread's next call on the same engine first ends it (cancelled)."""

    def __init__(self, seq, opts, keep):
        self._seq = seq
        self._engine = seq.engine
        self._opts, self._keep = opts, keep
        self._ch = _Channel()
        self._cb = _callback(self._ch)
        self._opts.on_token = self._cb
        self._c_stats = _lib.rp_gen_stats()
        self._thread: Optional[threading.Thread] = None
        self._waiting = False      # the worker waits for our answer about the last piece
        self._state = "ready"      # ready -> running -> done
        self._stats: Optional[GenStats] = None
        self.owner = threading.get_ident()
        self._engine._gate.acquire()   # released in _finish
        self._engine._stream = weakref.ref(self)
        seq._stream = weakref.ref(self)

    def __iter__(self):
        return self

    def __next__(self) -> str:
        if self._state == "done":
            raise StopIteration
        if self._state == "ready":
            self._state = "running"
            self._thread = threading.Thread(target=_work, name="reprise-stream", daemon=True,
                                            args=(self._seq._h, self._opts, self._c_stats, self._ch))
            self._thread.start()
        elif self._waiting:
            self._waiting = False
            self._ch.back.put(True)
        item = self._ch.out.get()
        if item is _DONE:
            self._finish()
            raise StopIteration
        self._waiting = True
        return item.decode("utf-8", "replace")

    def close(self) -> None:
        """Ends the stream: a paused generation stops at its last token (stop reason CANCELLED)."""
        if self._state == "done":
            return
        if self._state == "running":
            # a "stop" for the callback waiting now, or for the next one (also when an interruption came between
            # a piece's arrival and our noting that the worker waits for its answer)
            self._waiting = False
            self._ch.back.put(False)
            while self._ch.out.get() is not _DONE:
                self._ch.back.put(False)
        self._finish()

    def _finish(self) -> None:
        started = self._state == "running"
        self._state = "done"
        try:
            if self._thread is not None:
                try:
                    self._thread.join()
                except BaseException:   # an interruption: the worker ends at its next token; wait for it
                    self._thread.join()
                    raise
        finally:
            if started:
                self._stats = GenStats._of(self._c_stats)
            self._opts.on_token = _lib.token_fn()
            self._engine._stream = None
            self._seq._stream = None
            self._engine._gate.release()
        if self._ch.error is not None:
            e, self._ch.error = self._ch.error, None
            raise e

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def done(self) -> bool:
        return self._state == "done"

    @property
    def text(self) -> str:
        """The text so far (all of it once the stream has ended)."""
        return b"".join(self._ch.pieces).decode("utf-8", "replace")

    @property
    def tokens(self) -> List[int]:
        return list(self._ch.tokens)

    @property
    def stats(self) -> Optional[GenStats]:
        """The generation's figures (None for a stream closed before its first piece was asked for)."""
        self.close()
        return self._stats

    def __repr__(self):
        return "<reprise.Stream %s: %d pieces>" % (self._state, len(self._ch.pieces))
