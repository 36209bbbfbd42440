"""chat.py — a chat turn's prompt: messages rendered with the model's template, documents as segments of their own."""
from __future__ import annotations

from typing import List, Optional, Sequence

DOC_JOIN = "\n\n"


def with_documents(messages: list, documents: Sequence[str]) -> list:
    """The messages with the documents appended to the first system message (or in a new system message at
    the front), separated by blank lines."""
    docs = DOC_JOIN.join(documents)
    out = [dict(m) if isinstance(m, dict) else {"role": m[0], "content": m[1]} for m in messages]
    for m in out:
        if m.get("role") == "system":
            m["content"] = (m.get("content") or "") + DOC_JOIN + docs if m.get("content") else docs
            return out
    return [{"role": "system", "content": docs}] + out


def segments(text: str, documents: Optional[Sequence[str]]) -> List[str]:
    """The rendered text cut before and after each document (found in order), so that each document is a
    segment of its own and its KV is found again in any later prompt that holds it. A document the template
    changed (escaped, trimmed) cannot be found and stays inside its neighbour."""
    if not documents:
        return [text]
    out, pos = [], 0
    for d in documents:
        i = text.find(d, pos) if d else -1
        if i < 0:
            continue
        out += [text[pos:i], d]
        pos = i + len(d)
    out.append(text[pos:])
    return [s for s in out if s]
