"""_callbacks.py — Python callbacks the library calls (token streaming, load progress, agents, cache rows), and
the exceptions they raise.

An exception inside a callback is kept, the callback answers "stop" (the C call ends: cancelled), and the
exception is raised when the call returns. One case needs more: a signal handler's exception (Ctrl-C's
KeyboardInterrupt) is raised at the callback's very entry, before any try block in it, and ctypes can only
report it through sys.unraisablehook (printing "Exception ignored") and return an undefined value. So this module
chains a hook that routes such exceptions of this package's callbacks to the call they belong to (every other
one goes to the previous hook): the callback's next invocation answers "stop", and the call raises it."""
from __future__ import annotations

import sys
from typing import Callable, List


class Sink:
    """The exceptions raised in the callbacks of one call (or one object, e.g. a scheduler's turns)."""

    def __init__(self):
        self.errors: List[BaseException] = []

    def wrap(self, fn: Callable, stop_value):
        """fn as a callback: once an exception is kept, every later call answers stop_value."""
        def callback(*args):
            if self.errors:
                return stop_value
            try:
                return fn(*args)
            except BaseException as e:   # noqa: B902 — raised by reraise() when the C call returns
                self.errors.append(e)
                return stop_value
        callback._reprise_sink = self
        return callback

    def reraise(self) -> None:
        if self.errors:
            e = self.errors[0]
            self.errors.clear()
            raise e


_previous_hook = sys.unraisablehook


def _unraisable(u) -> None:
    sink = getattr(u.object, "_reprise_sink", None)
    if isinstance(sink, Sink) and u.exc_value is not None:
        sink.errors.append(u.exc_value)
        return
    _previous_hook(u)


sys.unraisablehook = _unraisable
