"""agents.py — reprise.Agents: the multi-agent scheduler (many sequences in one batch, speculative decoding,
suspend-and-yield on tool calls)."""
from __future__ import annotations

import ctypes
import threading
from typing import Callable, Dict, Iterable, List, Optional, Union

from . import _lib, options
from ._callbacks import Sink
from ._handle import Handle
from .enums import KVType, Policy, Status, parse
from .errors import Error, check
from .stats import AgentInfo, AgentsStats, from_struct

lib = _lib.lib
Tokens = Union[str, bytes, Iterable[int]]


class Agents(Handle):
    """Agents(model, max_agents=8, max_active=0, n_ctx=2048, n_batch=512, kv_type="f16", n_threads=...,
    policy="hal_yield", draft=None). Left out, a parameter keeps the library's default (rp_agents_default_params).

    add() gives an agent id; submit(id, prompt, **turn) queues a turn (text is tokenized with control tokens
    parsed, BOS first when the agent's history is empty); step() / run() advance every admitted agent; a turn
    that ends waiting (a tool call, or wait_after=True) continues with resume(id, tool_result). Turn options:
    the sampling ones, max_tokens, stop, suspend_on_tool_call, wait_after, and on_token=fn(id, token) (on the
    stepping thread; returning False cancels that agent's turn)."""

    _free = lib.rp_agents_free
    _what = "agents"

    def __init__(self, model, *, max_agents: Optional[int] = None, max_active: Optional[int] = None,
                 n_ctx: Optional[int] = None, n_batch: Optional[int] = None, kv_type=None,
                 n_threads: Optional[int] = None, policy=None, draft=None):
        self._ptr = None
        p = lib.rp_agents_default_params()
        for name, v in (("max_agents", max_agents), ("max_active", max_active), ("n_ctx", n_ctx),
                        ("n_batch", n_batch), ("n_threads", n_threads)):
            if v is not None:
                setattr(p, name, int(v))
        if kv_type is not None:
            p.kv_type = parse(KVType, kv_type, "kv_type")
        if policy is not None:
            p.policy = parse(Policy, policy, "policy")
        if draft is not None:
            p.draft = draft._h
        out = ctypes.c_void_p()
        check(lib.rp_agents_create(model._h, ctypes.byref(p), ctypes.byref(out)))
        super().__init__(out.value, parent=model)
        self.model = model
        self.draft = draft
        if draft is not None:
            draft._children.add(self)   # closing the draft model closes the scheduler first
        self._turns: Dict[int, tuple] = {}   # id -> what its turn's options point at (callback, stop strings)
        self._lock = threading.Lock()
        self._stepping = threading.RLock()   # held by step(): close() waits for it
        self._step_thread = None

    def __repr__(self):
        if self.closed:
            return "<reprise.Agents (closed)>"
        s = self.stats()
        return "<reprise.Agents: %d agents, %d active, %d waiting>" % (s.agents, s.active, s.waiting)

    @property
    def _hc(self):
        """The handle, for a call that takes the scheduler's lock: refused from a token callback, which the
        step calls with that lock held (the call would wait for itself)."""
        if self._step_thread == threading.get_ident():
            raise Error(Status.INVALID_ARG, "agents: a call on the scheduler from a token callback (the step "
                                            "that runs it holds the scheduler; return False to end a turn)")
        return self._h

    def add(self) -> int:
        """A new agent; its id. Error FULL when max_agents exist."""
        out = ctypes.c_int64()
        check(lib.rp_agents_add(self._hc, ctypes.byref(out)))
        return out.value

    def remove(self, agent: int) -> None:
        check(lib.rp_agents_remove(self._hc, int(agent)))
        with self._lock:
            self._turns.pop(int(agent), None)

    def _tokens_of(self, agent: int, tokens: Tokens) -> List[int]:
        if isinstance(tokens, (str, bytes)):
            return self.model.tokenize(tokens, add_bos=self.info(agent).n_tokens == 0, parse_special=True)
        return list(tokens)

    def _turn(self, kw: dict, where: str):
        """(rp_turn_opts, what it points at, the Sink of its callback's exceptions)."""
        on_token: Optional[Callable[[int, int], object]] = kw.pop("on_token", None)
        o, keep = options.turn_opts(kw, where)
        sink = Sink()
        if on_token is not None:   # an exception in it cancels that agent's turn, then comes out of step / run
            fn = _lib.agent_token_fn(sink.wrap(lambda _user, aid, tok: on_token(aid, tok) is not False, False))
            o.on_token = fn
            keep.append(fn)
        return o, keep, sink

    def _start(self, c_call, agent: int, tokens: Tokens, turn: dict, where: str) -> None:
        t = self._tokens_of(agent, tokens)
        o, keep, sink = self._turn(turn, where)
        arr, n = _lib.token_array(t)
        check(c_call(self._hc, int(agent), arr, n, ctypes.byref(o)))
        with self._lock:   # alive until the agent's next turn (a refused one leaves the running turn's) or removal
            self._turns[int(agent)] = (o, keep, sink)

    def _reraise(self) -> None:
        with self._lock:
            sinks = [t[2] for t in self._turns.values() if t[2].errors]
        for s in sinks[1:]:
            s.errors.clear()
        if sinks:
            sinks[0].reraise()

    def submit(self, agent: int, tokens: Tokens, **turn) -> None:
        """Queues tokens (or text) for the agent's next turn, appended to its history."""
        self._start(lib.rp_agents_submit, agent, tokens, turn, "submit")

    def resume(self, agent: int, tokens: Tokens, **turn) -> None:
        """A waiting agent's tool result (tokens or text): appended, and its turn continues."""
        self._start(lib.rp_agents_resume, agent, tokens, turn, "resume")

    def cancel(self, agent: int) -> None:
        lib.rp_agents_cancel(self._hc, int(agent))

    def close(self) -> None:
        if self.closed:
            return
        self._hc   # not from a token callback
        with self._stepping:
            super().close()

    def step(self) -> bool:
        """One batch over every admitted agent's work; False when there was none."""
        ran = ctypes.c_bool()
        with self._stepping:
            h = self._hc
            self._step_thread = threading.get_ident()
            try:
                st = lib.rp_agents_step(h, ctypes.byref(ran))
            finally:
                self._step_thread = None
        self._reraise()
        check(st)
        return bool(ran.value)

    def run(self) -> None:
        """Steps until no agent has work (waiting agents have none). rp_agents_run's loop, here in Python, so
        that a Ctrl-C stops it between two steps (the agents keep their state: run() again goes on)."""
        while self.step():
            pass

    def info(self, agent: int) -> AgentInfo:
        s = _lib.rp_agent_info()
        check(lib.rp_agents_info(self._hc, int(agent), ctypes.byref(s)))
        return AgentInfo._of(s)

    def tokens(self, agent: int, start: int = 0) -> List[int]:
        """The agent's history from token `start`."""
        n_all = self.info(agent).n_tokens
        cap = max(n_all - start, 0)
        buf = (_lib.c_token * max(cap, 1))()
        n = ctypes.c_int32()
        check(lib.rp_agents_tokens(self._hc, int(agent), int(start), buf, cap, ctypes.byref(n)))
        return buf[:n.value]

    def text(self, agent: int, start: int = 0) -> str:
        """The agent's history from token `start`, as text."""
        return self.model.detokenize(self.tokens(agent, start))

    def stats(self) -> AgentsStats:
        s = _lib.rp_agents_stats()
        lib.rp_agents_stats_get(self._hc, ctypes.byref(s))
        return from_struct(AgentsStats, s)
