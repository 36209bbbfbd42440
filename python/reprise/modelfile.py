"""modelfile.py — reprise.ModelFile: a GGUF file's header, metadata and tensor table as stored (no model load)."""
from __future__ import annotations

import ctypes
import os
from typing import Dict, List, Optional, Tuple, Union

from . import _lib
from ._handle import Handle
from .errors import check

lib = _lib.lib


class ModelFile(Handle):
    """ModelFile(path): what `reprise inspect` lists, read without loading weights: describe() (version,
    alignment, file_size, data_offset, n_meta, n_tensors, tensor_bytes), meta() (key -> value as text),
    tensors() (name, type name, shape, offset, bytes). Read-only; any thread."""

    _free = lib.rp_model_file_close
    _what = "model file"

    def __init__(self, path: Union[str, os.PathLike]):
        self._ptr = None
        out = ctypes.c_void_p()
        check(lib.rp_model_file_open(os.fsencode(os.fspath(path)), ctypes.byref(out)))
        super().__init__(out.value)

    def describe(self) -> Dict[str, int]:
        d = lib.rp_model_file_describe(self._h)
        return {f: getattr(d, f) for f, _t in _lib.rp_model_file_desc._fields_}

    def meta(self, key: Optional[str] = None, cap: int = 512):
        """Every key's value as display text (strings quoted, arrays abbreviated), in file order; with key, that
        one's (None when absent)."""
        h = self._h
        buf = ctypes.create_string_buffer(cap)
        if key is not None:
            i = lib.rp_model_file_find_meta(h, key.encode())
            if i < 0:
                return None
            check(lib.rp_model_file_meta_text(h, i, buf, cap))
            return buf.value.decode(errors="replace")
        out = {}
        e = _lib.rp_meta_entry()
        for i in range(lib.rp_model_file_describe(h).n_meta):
            check(lib.rp_model_file_meta(h, i, ctypes.byref(e)))
            check(lib.rp_model_file_meta_text(h, i, buf, cap))
            out[e.key.decode(errors="replace")] = buf.value.decode(errors="replace")
        return out

    def tensors(self) -> List[Tuple[str, str, Tuple[int, ...], int, int]]:
        """(name, type name, shape with ne[0] first, offset in the data section, bytes) of every tensor."""
        h = self._h
        t = _lib.rp_tensor_desc()
        rows = []
        for i in range(lib.rp_model_file_describe(h).n_tensors):
            check(lib.rp_model_file_tensor(h, i, ctypes.byref(t)))
            rows.append((t.name.decode(errors="replace"), t.type_name.decode(), tuple(t.ne[:t.n_dims]), t.offset,
                         t.bytes))
        return rows
