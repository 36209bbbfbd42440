"""enums.py — the C API's enumerations as IntEnums, and the parsing of options given as names or numbers."""
from __future__ import annotations

import enum


class Status(enum.IntEnum):
    OK = 0
    INVALID_ARG = 1
    IO = 2
    FORMAT = 3
    UNSUPPORTED = 4
    NOMEM = 5
    NOT_FOUND = 6
    RANGE = 7
    FULL = 8
    INTERNAL = 9
    CANCELLED = 10


class KVType(enum.IntEnum):
    F32 = 0
    F16 = 1
    Q8_0 = 8


class Reuse(enum.IntEnum):
    NONE = 0
    PREFIX = 1
    FULL = 2
    BLEND = 3


class Select(enum.IntEnum):
    HYBRID = 0
    DEV = 1
    ATTN = 2


class Pooling(enum.IntEnum):
    MODEL = -1
    NONE = 0
    MEAN = 1
    CLS = 2
    LAST = 3


class StopReason(enum.IntEnum):
    NONE = 0
    EOG = 1
    LENGTH = 2
    STRING = 3
    CONTEXT = 4
    CANCELLED = 5


class Policy(enum.IntEnum):
    BATCH_AR = 0
    SEQ_SD = 1
    BATCH_SD = 2
    HAL = 3
    HAL_YIELD = 4
    UNIFORM = 5


class AgentState(enum.IntEnum):
    IDLE = 0
    PREFILL = 1
    DECODE = 2
    WAITING = 3


def parse(cls, value, what: str) -> int:
    """value as a member of cls: the member itself, its number, or its name in any case ("blend", "q8_0",
    "hal-yield"). Anything else is a ValueError naming the choices."""
    if isinstance(value, cls):
        return int(value)
    if isinstance(value, str):
        key = value.strip().upper().replace("-", "_")
        if key in cls.__members__:
            return int(cls[key])
    elif isinstance(value, int) and not isinstance(value, bool) and value in cls._value2member_map_:
        return int(value)
    names = ", ".join(m.lower() for m in cls.__members__)
    raise ValueError("%s: %r is not one of %s" % (what, value, names))


def member(cls, value: int):
    """cls(value), or the plain int when the library returns a value this package does not know."""
    return cls(value) if value in cls._value2member_map_ else value
