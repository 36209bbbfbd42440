"""cache.py — reprise.Cache: maintenance of a cache directory's store (info, list, verify, evict, compact, clear)."""
from __future__ import annotations

import ctypes
import os
from typing import Iterator, List, Tuple, Union

from . import _lib
from ._callbacks import Sink
from ._handle import Handle
from .enums import KVType, parse
from .errors import check
from .stats import CacheEntry, CacheInfo, VerifyResult, from_struct

lib = _lib.lib


class Cache(Handle):
    """Cache(dir, write=False) (or Cache.open): the store in a cache directory. Read-only handles give info,
    list and verify; a writing handle (it takes the store's lock: refused while an engine writes to it) also
    verifies with fix, evicts, compacts and clears. A directory holding no store is Error NOT_FOUND."""

    _free = lib.rp_cache_close
    _what = "cache"

    def __init__(self, directory: Union[str, os.PathLike], write: bool = False):
        self._ptr = None
        self.directory = os.fspath(directory)
        self.write = bool(write)
        out = ctypes.c_void_p()
        check(lib.rp_cache_open(os.fsencode(self.directory), self.write, ctypes.byref(out)))
        super().__init__(out.value)
        self.model = None

    @classmethod
    def open(cls, directory, write: bool = False) -> "Cache":
        return cls(directory, write)

    def __repr__(self):
        return "<reprise.Cache %r%s%s>" % (self.directory, " (write)" if self.write else "",
                                          " (closed)" if self.closed else "")

    def bind(self, model, kv_type="f16") -> "Cache":
        """Restricts the handle to the chunks model wrote with kv_type; Error NOT_FOUND when there are none."""
        check(lib.rp_cache_bind(self._h, model._h, parse(KVType, kv_type, "kv_type")))
        self.model = model
        return self

    def info(self) -> CacheInfo:
        s = _lib.rp_cache_info()
        check(lib.rp_cache_info_get(self._h, ctypes.byref(s)))
        return from_struct(CacheInfo, s)

    def list(self) -> List[CacheEntry]:
        """Every chunk row, in id order."""
        rows: List[CacheEntry] = []
        sink = Sink()

        def one(_user, e):
            rows.append(CacheEntry._of(e.contents))
            return True
        fn = _lib.cache_list_fn(sink.wrap(one, False))
        st = lib.rp_cache_list(self._h, fn, None)
        sink.reraise()
        check(st)
        return rows

    def __iter__(self) -> Iterator[CacheEntry]:
        return iter(self.list())

    def verify(self, fix: bool = False) -> VerifyResult:
        """SQLite's quick_check, then every row's checksums; fix (a writing handle) deletes corrupt rows."""
        bad: List[Tuple[int, str]] = []
        sink = Sink()

        def on_bad(_user, cid, why):
            bad.append((cid, (why or b"").decode(errors="replace")))
        fn = _lib.cache_bad_fn(sink.wrap(on_bad, None))
        db_ok = ctypes.c_bool()
        why = ctypes.create_string_buffer(512)
        ok, corrupt = ctypes.c_uint64(), ctypes.c_uint64()
        check(lib.rp_cache_verify(self._h, bool(fix), fn, None, ctypes.byref(db_ok), why, len(why), ctypes.byref(ok),
                                  ctypes.byref(corrupt)))
        sink.reraise()
        return VerifyResult(bool(db_ok.value), why.value.decode(errors="replace"), ok.value, corrupt.value, tuple(bad))

    def evict(self, target_bytes: int, lru: bool = False) -> Tuple[int, int]:
        """Cost-aware (or LRU) eviction until the store uses at most target_bytes: (chunks evicted, bytes freed)."""
        n = ctypes.c_int32()
        freed = ctypes.c_uint64()
        check(lib.rp_cache_evict(self._h, int(target_bytes), bool(lru), ctypes.byref(n), ctypes.byref(freed)))
        return n.value, freed.value

    def compact(self) -> int:
        """Removes orphans (payloads, keywords, vectors, files without rows), then VACUUM: how many removed."""
        removed = ctypes.c_uint64()
        check(lib.rp_cache_compact(self._h, ctypes.byref(removed)))
        return removed.value

    def clear(self) -> int:
        """Deletes every chunk the handle sees (all, or the bound model's): how many."""
        n = ctypes.c_uint64()
        check(lib.rp_cache_clear(self._h, ctypes.byref(n)))
        return n.value
