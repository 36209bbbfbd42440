"""errors.py — reprise.Error: a failed call's status code, its name, and rp_last_error()'s detail."""
from __future__ import annotations

from . import _lib
from .enums import Status


class Error(Exception):
    """A Reprise call failed.

    status: the rp_status (a reprise.Status); status_name: its name ("invalid argument", ...);
    detail: what rp_last_error() said (e.g. "gguf: cannot open 'x.gguf': No such file or directory").
    """

    def __init__(self, status, detail: str = ""):
        self.status = Status(status) if status in Status._value2member_map_ else status
        self.status_name = _lib.lib.rp_strerror(int(status)).decode(errors="replace")
        self.detail = detail
        super().__init__("%s: %s" % (self.status_name, detail) if detail else self.status_name)


def last_error() -> str:
    """rp_last_error() on this thread."""
    return _lib.lib.rp_last_error().decode(errors="replace")


def check(st: int) -> None:
    """Raises Error for a status other than RP_OK, with this thread's rp_last_error() (read at once)."""
    if st != 0:
        raise Error(st, last_error())
