"""model.py — reprise.Model: a loaded GGUF model (weights, tokenizer, chat template), and the system calls."""
from __future__ import annotations

import ctypes
import json
import os
from dataclasses import dataclass
from typing import Callable, Iterable, List, Optional, Sequence, Union

from . import _lib
from ._callbacks import Sink
from ._handle import Handle
from .enums import Status
from .errors import Error, check, last_error

lib = _lib.lib


def version() -> str:
    """The library's version (rp_version)."""
    return lib.rp_version().decode()


def library_path() -> str:
    """Where the loaded libreprise.so came from."""
    return _lib.path


def system_info() -> str:
    """One line: CPU brand, features and the active kernel level."""
    need = lib.rp_system_info(None, 0)
    buf = ctypes.create_string_buffer(need + 1)
    lib.rp_system_info(buf, len(buf))
    return buf.value.decode(errors="replace")


def cpu_select(level: str) -> None:
    """Kernel level for later model loads: "auto", "scalar", "avx2", "avx512", "amx"."""
    check(lib.rp_cpu_select(level.encode()))


def cpu_active() -> str:
    return lib.rp_cpu_active().decode()


@dataclass(frozen=True)
class ModelDesc:
    """rp_model_desc: a model's identity and hyper-parameters."""
    name: str
    arch: str
    chat_format: str
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_ff: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    weight_bytes: int
    fingerprint: int
    has_weights: bool
    has_tokenizer: bool
    n_rot: int
    rope_neox: bool
    rope_llama3: bool
    rope_base: float
    rms_eps: float
    tied_output: bool
    tokenizer: str
    n_tokens: int
    n_swa: int          # the sliding window of local layers (Gemma 2 / 3), 0: none
    n_swa_layers: int   # layers with that window


#: the first buffer size the text / token calls try (they retry with what the library says it needs); tests
#: set it tiny to exercise the retries
FIRST_CAP = None

Message = Union[dict, Sequence]   # {"role": ..., "content": ...} or (role, content)
_MSG_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def _c_messages(messages: Iterable[Message]):
    """An rp_chat_message array (and the bytes it points at, to keep alive) from OpenAI-shaped messages."""
    rows = []
    for i, msg in enumerate(messages):
        if isinstance(msg, dict):
            extra = set(msg) - set(_MSG_KEYS)
            if extra:
                raise ValueError("chat: message %d has unknown keys %s (known: %s)"
                                 % (i, ", ".join(sorted(extra)), ", ".join(_MSG_KEYS)))
            d = msg
        elif isinstance(msg, (tuple, list)) and len(msg) == 2:
            d = {"role": msg[0], "content": msg[1]}
        else:
            raise TypeError("chat: message %d is neither a dict nor a (role, content) pair: %r" % (i, msg))
        row = []
        for k in _MSG_KEYS:
            v = d.get(k)
            if v is not None and not isinstance(v, str):
                if k != "tool_calls":
                    raise TypeError("chat: message %d: %s must be a string, not %s" % (i, k, type(v).__name__))
                v = json.dumps(v)
            row.append(v.encode() if v is not None else None)
        rows.append(row)
    arr = (_lib.rp_chat_message * max(len(rows), 1))()
    for i, row in enumerate(rows):
        arr[i] = _lib.rp_chat_message(*row)
    return arr, len(rows), rows


class Model(Handle):
    """A GGUF model, loaded and validated: Model(path, n_threads=..., vocab_only=False, cpu_level=None,
    progress=None, n_gpu_layers=None, gpu_device=None). Immutable once loaded; any number of threads may use it
    at once.

    n_gpu_layers / gpu_device: the GPU offload (docs/gpu.md): None = the library's default (every layer when a
    GPU is present, lavapipe only when named), 0 = CPU only, N = the last N layers; gpu_notice says what it did.

    progress: a callable(done, total) called while the weights are read and packed (units are bytes);
    returning False cancels the load (reprise.Error with status CANCELLED)."""

    _free = lib.rp_model_free
    _what = "model"

    def __init__(self, path: Union[str, os.PathLike], *, n_threads: Optional[int] = None, vocab_only: bool = False,
                 cpu_level: Optional[int] = None, progress: Optional[Callable[[int, int], object]] = None,
                 n_gpu_layers: Optional[int] = None, gpu_device: Optional[str] = None):
        self._ptr = None
        p = lib.rp_model_default_params()
        p.vocab_only = bool(vocab_only)
        if n_threads is not None:
            p.n_threads = int(n_threads)
        if cpu_level is not None:
            p.cpu_level = int(cpu_level)
        if n_gpu_layers is not None:
            p.n_gpu_layers = int(n_gpu_layers)
        gpu_dev = None if gpu_device is None else os.fsencode(str(gpu_device))
        p.gpu_device = gpu_dev   # kept alive in this frame until the load returns
        # always a progress callback: an exception in it (a Ctrl-C's too) cancels the load, then comes out
        sink = Sink()
        user = progress or (lambda done, total: True)
        cb = _lib.progress_fn(sink.wrap(lambda _user, done, total: user(done, total) is not False, False))
        p.progress = cb
        self.path = os.fspath(path)
        out = ctypes.c_void_p()
        st = lib.rp_model_load(os.fsencode(self.path), p, ctypes.byref(out))
        sink.reraise()
        if st != 0:
            detail = last_error()
            raise Error(st, detail if self.path in detail else "%s: %s" % (self.path, detail))
        super().__init__(out.value)
        self._desc = None

    def __repr__(self):
        if self.closed:
            return "<reprise.Model %r (closed)>" % self.path
        d = self.describe()
        return "<reprise.Model %r: %s, %d layers, vocab %d>" % (d.name, d.arch, d.n_layer, d.n_vocab)

    # ---- metadata ----
    def describe(self) -> ModelDesc:
        """Hyper-parameters and identity (rp_model_describe)."""
        h = self._h
        if self._desc is None:
            d = lib.rp_model_describe(h)
            vals = {}
            for f, _t in _lib.rp_model_desc._fields_:
                v = getattr(d, f)
                vals[f] = v.decode(errors="replace") if isinstance(v, bytes) else v
            self._desc = ModelDesc(**vals)
        return self._desc

    def meta(self, key: str) -> Optional[str]:
        """A GGUF metadata value as text (numbers in decimal, arrays as "[n items]"), or None when absent."""
        k = key.encode()
        need = lib.rp_model_meta(self._h, k, None, 0)
        if need < 0:
            return None
        buf = ctypes.create_string_buffer(need + 1)
        lib.rp_model_meta(self._h, k, buf, len(buf))
        return buf.value.decode(errors="replace")

    @property
    def n_vocab(self) -> int:
        return self.describe().n_vocab

    @property
    def gpu_layers(self) -> int:
        """Layers running on the GPU (0: CPU only)."""
        return int(lib.rp_model_gpu_layers(self._h))

    @property
    def gpu_notice(self) -> str:
        """The GPU start-up line: the device and the layers, or why CPU only."""
        v = lib.rp_model_gpu_notice(self._h)
        return v.decode(errors="replace") if v else ""

    # ---- tokenizer ----
    def tokenize(self, text: Union[str, bytes], add_bos: bool = True, parse_special: bool = False) -> List[int]:
        """Token ids of text. add_bos: prepend BOS when the vocabulary asks for one; parse_special: control-token
        texts such as "<|im_start|>" become their ids."""
        b = text.encode() if isinstance(text, str) else bytes(text)
        cap = FIRST_CAP or len(b) + 8
        while True:
            out = (_lib.c_token * cap)()
            n = ctypes.c_int32()
            st = lib.rp_tokenize(self._h, b, len(b), bool(add_bos), bool(parse_special), out, cap, ctypes.byref(n))
            if st == Status.FULL and n.value > cap:
                cap = n.value
                continue
            check(st)
            return list(out[:n.value])

    def detokenize(self, tokens: Iterable[int], render_special: bool = False) -> str:
        """The text of tokens (invalid UTF-8 replaced)."""
        return self.detokenize_bytes(tokens, render_special).decode("utf-8", "replace")

    def detokenize_bytes(self, tokens: Iterable[int], render_special: bool = False) -> bytes:
        arr, n = _lib.token_array(tokens)
        cap = FIRST_CAP or max(16, 8 * n)
        while True:
            buf = ctypes.create_string_buffer(cap)
            need = ctypes.c_size_t()
            st = lib.rp_detokenize(self._h, arr, n, bool(render_special), buf, cap, ctypes.byref(need))
            if st == Status.FULL and need.value + 1 > cap:
                cap = need.value + 1
                continue
            check(st)
            return buf.raw[:need.value]

    def token_to_piece(self, token: int, render_special: bool = False) -> bytes:
        """The bytes of one token (may be part of a UTF-8 character; control tokens only with render_special)."""
        h = self._h
        if not 0 <= int(token) < self.n_vocab:
            raise Error(Status.RANGE, "token_to_piece: token %d not in [0, %d)" % (token, self.n_vocab))
        cap = FIRST_CAP or 256
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = lib.rp_token_to_piece(h, int(token), bool(render_special), buf, cap)
            # the library returns the bytes written (at most cap), not the bytes needed: a full buffer may
            # mean a longer piece
            if n < cap:
                return buf.raw[:max(n, 0)]
            cap *= 4

    @staticmethod
    def _tok(t: int) -> Optional[int]:
        return None if t < 0 else t

    @property
    def bos(self) -> Optional[int]:
        """The BOS token, or None."""
        return self._tok(lib.rp_token_bos(self._h))

    @property
    def eos(self) -> Optional[int]:
        return self._tok(lib.rp_token_eos(self._h))

    @property
    def eot(self) -> Optional[int]:
        """<|eot_id|>, <|im_end|>, ... or None."""
        return self._tok(lib.rp_token_eot(self._h))

    def is_eog(self, token: int) -> bool:
        """Whether token ends a generation."""
        return bool(lib.rp_token_is_eog(self._h, int(token)))

    # ---- chat ----
    def set_chat_template(self, spec: Optional[str]) -> None:
        """Replaces the chat template: a built-in's name ("llama3", "chatml", "qwen3", "llama2") or a Jinja template
        file; None goes back to the model's own. A template that fails raises, and the old one stays."""
        check(lib.rp_chat_template_set(self._h, None if spec is None else os.fsencode(spec)))

    def check_chat_template(self) -> None:
        """Raises when the model's chat template cannot be used (its error names line:column), or it has none."""
        check(lib.rp_chat_template_check(self._h))

    @property
    def chat_template(self) -> str:
        """Where the chat template comes from: "gguf", a built-in's name, "file" or "none"."""
        return lib.rp_chat_template_name(self._h).decode()

    def chat_render(self, messages: Iterable[Message], tools=None, add_generation_prompt: bool = True) -> str:
        """The prompt text of messages under the model's chat template. messages: dicts in OpenAI's shape
        (role, content, tool_calls, tool_call_id, name) or (role, content) pairs; tools: OpenAI tool
        definitions (a list, or its JSON text)."""
        arr, n, _keep = _c_messages(messages)
        tj = None if tools is None else (tools if isinstance(tools, str) else json.dumps(tools)).encode()
        cap = FIRST_CAP or 4096
        while True:
            buf = ctypes.create_string_buffer(cap)
            need = ctypes.c_size_t()
            st = lib.rp_chat_render(self._h, arr, n, tj, bool(add_generation_prompt), buf, cap, ctypes.byref(need))
            if st == Status.FULL and need.value + 1 > cap:
                cap = need.value + 1
                continue
            check(st)
            return buf.raw[:need.value].decode("utf-8", "replace")
