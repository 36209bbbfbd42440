"""_handle.py — what every wrapped C handle shares: close() / context manager / __del__, and the parents it keeps
alive and the children a close() takes down first."""
from __future__ import annotations

import weakref

from .enums import Status
from .errors import Error


class Handle:
    """An owned C handle. close() frees it (children first: an engine's sequences before the engine); using it
    afterwards raises reprise.Error. A handle also closes when collected, and it holds a reference to its
    parent (a Sequence to its Engine, an Engine to its Model), so a parent is never freed under a child."""

    _free = None          # the C function that frees the handle (set by subclasses)
    _what = "handle"

    def __init__(self, ptr, parent=None, weak_parent: bool = False):
        self._ptr = ptr
        # a weak parent: the parent holds this child itself (an engine's own sequence), and a strong reference
        # back would make a cycle that only the cyclic collector frees
        self._parent_ref = weakref.ref(parent) if weak_parent and parent is not None else (lambda: parent)
        self._children = weakref.WeakSet()
        if parent is not None:
            parent._children.add(self)

    @property
    def closed(self) -> bool:
        return not self._ptr

    @property
    def _h(self):
        if not self._ptr:
            raise Error(Status.INVALID_ARG, "%s: used after close()" % self._what)
        return self._ptr

    def _before_free(self):
        """Subclasses: what must happen before the handle is freed (e.g. stopping a stream)."""

    def close(self) -> None:
        """Frees the C handle now (its children first). Idempotent."""
        if not self._ptr:
            return
        for child in list(self._children):
            child.close()
        self._before_free()
        ptr, self._ptr = self._ptr, None
        type(self)._free(ptr)
        parent = self._parent_ref()
        if parent is not None:
            parent._children.discard(self)

    def __enter__(self):
        self._h
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:   # interpreter shutdown: modules may be half gone
            pass
