"""stats.py — the figures calls return, as dataclasses mirroring their C structs field by field."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Tuple

from .enums import AgentState, StopReason, member


def from_struct(cls, s, **override):
    """cls built from the ctypes struct s (same field names); override replaces fields."""
    vals = {f.name: getattr(s, f.name) for f in dataclasses.fields(cls) if f.name not in override}
    vals.update(override)
    return cls(**vals)


@dataclass(frozen=True)
class GenStats:
    """rp_gen_stats: what one prefill / generate did. Reuse counts are prompt tokens."""
    prompt_tokens: int
    reused_prefix: int          # from the cache's prefix tree (exact or approximate)
    reused_prefix_exact: int    # of those, exactly what a plain prefill computes
    reused_nonprefix: int       # chunks cached elsewhere, re-rotated (approximate)
    recomputed: int             # reused tokens blend recomputed past its check layer
    computed: int               # prompt tokens computed from scratch
    load_failed: int            # cached chunks that failed to load or verify (never used; recomputed)
    generated: int              # tokens sampled (an end-of-generation token included)
    ttft_ms: float
    prefill_ms: float
    decode_ms: float
    prompt_tok_per_s: float
    gen_tok_per_s: float
    stop: StopReason
    chunks: int
    subchunk: int
    computed_rows: int
    calls: int
    pad_rows: int
    attempts: int
    match_ms: float
    load_ms: float
    load_exposed_ms: float
    compute_ms: float
    plan_ms: float
    bytes_loaded: int
    static_shapes: bool         # the prefill ran in static mode (fixed call shapes)
    calibrated: bool            # ... with shapes from a stored calibration
    commit_status: int          # caching the prompt's chunks: 0 (RP_OK) or why they were not cached

    @classmethod
    def _of(cls, s) -> "GenStats":
        return from_struct(cls, s, stop=member(StopReason, s.stop))

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["stop"] = self.stop.name.lower() if isinstance(self.stop, StopReason) else self.stop
        return d


@dataclass(frozen=True)
class EngineStats:
    """rp_engine_stats: the chunk cache (RAM pool) and its store."""
    cache_chunks: int
    cache_bytes: int
    inserts: int
    evictions: int
    prefix_hits: int
    content_hits: int
    misses: int
    flash_hits: int
    loads: int
    load_failures: int
    prefetched: int
    prefetch_used: int
    written: int
    write_failures: int
    has_store: bool
    store_bytes: int
    store_damaged: bool


@dataclass(frozen=True)
class AgentInfo:
    """rp_agent_info: one agent of the scheduler."""
    state: AgentState
    n_tokens: int               # history length
    generated: int              # tokens of the current / last turn
    drafted: int
    accepted: int
    stop: StopReason            # how the last turn ended (NONE while running or waiting)

    @classmethod
    def _of(cls, s) -> "AgentInfo":
        return from_struct(cls, s, state=member(AgentState, s.state), stop=member(StopReason, s.stop))


@dataclass(frozen=True)
class AgentsStats:
    """rp_agents_stats: the scheduler as a whole."""
    steps: int
    rows: int
    generated: int
    drafted: int
    accepted: int
    agents: int
    active: int
    waiting: int


@dataclass(frozen=True)
class CacheInfo:
    """rp_cache_info: a cache directory's store."""
    chunks: int
    corrupt: int
    files: int
    blobs: int
    raw_bytes: int
    stored_bytes: int
    disk_bytes: int
    keywords: int
    vectors: int
    write_failures: int
    models: int


@dataclass(frozen=True)
class CacheEntry:
    """rp_cache_entry: one chunk row of a store (tokens None for a damaged row)."""
    id: int
    parent: int
    model: int
    n_tokens: int
    pos0: int
    exact: bool
    in_file: bool
    compressed: bool
    raw_bytes: int
    stored_bytes: int
    hits: int
    last_used: int
    used_at: float              # Unix time of the last use
    tokens: Optional[Tuple[int, ...]]

    @classmethod
    def _of(cls, s) -> "CacheEntry":
        toks = tuple(s.tokens[:s.n_tokens]) if s.tokens and s.n_tokens > 0 else None
        return from_struct(cls, s, tokens=toks)


@dataclass(frozen=True)
class VerifyResult:
    """What Cache.verify found: SQLite's quick_check (db_ok, why), then every row's checksums."""
    db_ok: bool
    why: str
    ok: int
    corrupt: int
    bad: Tuple[Tuple[int, str], ...]   # (chunk id, why) of each corrupt row
