"""prompt.py — reprise.Prompt: tokens plus the segment boundaries (documents, messages) the reuse engine chunks at."""
from __future__ import annotations

import ctypes
from typing import Iterable, List, Optional, Union

from . import _lib
from ._handle import Handle
from .errors import check

lib = _lib.lib


class Prompt(Handle):
    """A prompt built of segments: Prompt(model, *segments, separator=None).

    Each segment (a document, a message, a question) is tokenized on its own and starts a chunk boundary, so its
    KV is cached and found again wherever it sits in a later prompt. The first segment gets BOS when the
    vocabulary asks for one. A segment may be text, or a list of token ids. separator (e.g. "\\n\\n") also cuts
    a chunk after each of its occurrences, in what is there when it is given (call split_at again after adding
    more)."""

    _free = lib.rp_prompt_free
    _what = "prompt"

    def __init__(self, model, *segments: Union[str, Iterable[int]], separator: Optional[str] = None):
        self._ptr = None
        model._h
        out = ctypes.c_void_p()
        check(lib.rp_prompt_create(ctypes.byref(out)))
        super().__init__(out.value)
        self.model = model
        for s in segments:
            self.add(s)
        if separator:
            self.split_at(separator)

    def add(self, segment: Union[str, bytes, Iterable[int]]) -> "Prompt":
        """Appends a segment: text (control-token texts parsed) or token ids. Returns the prompt."""
        if isinstance(segment, (str, bytes)):
            return self.add_text(segment)
        return self.add_tokens(segment, new_segment=True)

    def add_text(self, text: Union[str, bytes]) -> "Prompt":
        b = text.encode() if isinstance(text, str) else bytes(text)
        check(lib.rp_prompt_add_text(self._h, self.model._h, b, len(b)))
        return self

    def add_tokens(self, tokens: Iterable[int], new_segment: bool = True) -> "Prompt":
        """Appends token ids, as a new segment or continuing the last one."""
        arr, n = _lib.token_array(tokens)
        check(lib.rp_prompt_add_tokens(self._h, arr, n, bool(new_segment)))
        return self

    def split_at(self, separator: str) -> "Prompt":
        """Also cuts a chunk after every occurrence of separator's tokens."""
        check(lib.rp_prompt_split_at(self._h, self.model._h, separator.encode()))
        return self

    def clear(self) -> None:
        lib.rp_prompt_clear(self._h)

    @property
    def tokens(self) -> List[int]:
        n = lib.rp_prompt_n_tokens(self._h)
        return lib.rp_prompt_tokens(self._h)[:n] if n else []

    @property
    def bounds(self) -> List[int]:
        """Token offsets where segments (and separator cuts) start, each > 0."""
        n = lib.rp_prompt_n_bounds(self._h)
        return lib.rp_prompt_bounds(self._h)[:n] if n else []

    @property
    def n_segments(self) -> int:
        return lib.rp_prompt_n_segments(self._h)

    def __len__(self) -> int:
        return lib.rp_prompt_n_tokens(self._h)

    def __repr__(self):
        if self.closed:
            return "<reprise.Prompt (closed)>"
        return "<reprise.Prompt: %d tokens, %d segments>" % (len(self), self.n_segments)
