"""reprise — Python bindings of libreprise (include/reprise.h) over ctypes.

    import reprise
    with reprise.Model("stories260K.gguf") as m, reprise.Engine(m, n_threads=2) as e:
        text, stats = e.generate("Once upon a time", max_tokens=32, temperature=0)
        for piece in e.stream("Lily went to the park", max_tokens=32):
            print(piece, end="", flush=True)

Handles (Model, ModelFile, Engine, Sequence, Embedder, Prompt, Agents, Cache) free their C object on close(), at the end of a `with`
block, or when collected; each keeps its parents alive, and closing a parent closes its children first. A failed
call raises reprise.Error (status, status_name, detail = rp_last_error()). The library is found through
REPRISE_LIBRARY, else next to this package, else a checkout's build/libreprise.so, else
ctypes.util.find_library("reprise") (see reprise.library_path()).
"""
from ._lib import LibraryNotFound
from .agents import Agents
from .cache import Cache
from .embed import Embedder
from .engine import Engine, Generation, Sequence
from .enums import AgentState, KVType, Policy, Pooling, Reuse, Select, Status, StopReason
from .errors import Error
from .model import Model, ModelDesc, cpu_active, cpu_select, library_path, system_info, version
from .modelfile import ModelFile
from .prompt import Prompt
from .stats import AgentInfo, AgentsStats, CacheEntry, CacheInfo, EngineStats, GenStats, VerifyResult
from .stream import Stream

__version__ = "0.1.0"

__all__ = [
    "Agents", "AgentInfo", "AgentState", "AgentsStats", "Cache", "CacheEntry", "CacheInfo", "Embedder", "Engine",
    "EngineStats",
    "Error", "GenStats", "Generation", "KVType", "LibraryNotFound", "Model", "ModelDesc", "ModelFile", "Policy",
    "Pooling", "Prompt", "Reuse", "Select", "Sequence", "Status", "StopReason", "Stream", "VerifyResult", "cpu_active",
    "cpu_select", "library_path", "system_info", "version",
]
