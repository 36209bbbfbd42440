"""_gate.py — the lock that serializes the calls on one engine (the C API: one thread at a time per engine).

Reentrant for the thread that holds it, like threading.RLock, but any thread may release it: a stream holds its
engine's gate from its creation to its end, and its end may come from a garbage collection on another thread."""
from __future__ import annotations

import threading


class Gate:
    def __init__(self):
        self._cv = threading.Condition(threading.Lock())
        self._owner = None
        self._depth = 0

    def acquire(self) -> None:
        me = threading.get_ident()
        with self._cv:
            while self._owner is not None and self._owner != me:
                self._cv.wait()
            self._owner = me
            self._depth += 1

    def release(self) -> None:
        with self._cv:
            self._depth -= 1
            if self._depth <= 0:
                self._depth = 0
                self._owner = None
                self._cv.notify_all()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()
