"""Text every app database stores: the characters PostgreSQL or the drivers refuse, taken out.

PostgreSQL text cannot hold NUL, and a lone UTF-16 surrogate has no UTF-8 form, so neither
psycopg2 nor sqlite3 can send one. Both reach us from outside: NUL in a crawled plain-text page,
surrogates in JSON a client sends (`"\\ud800"` parses to one). Text without them is returned as is.
"""

from __future__ import annotations

import re
from typing import Any

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> str:
    """`text` without NUL and lone surrogates."""
    return _UNSTORABLE.sub("", text)


def storable_json(value: Any) -> Any:
    """A JSON-like value with `storable` applied to every string in it, object keys included.

    PostgreSQL's `json` type keeps an escaped `\\u0000` or lone surrogate as written, but refuses
    it the moment SQL reads it as text (`->>`) or as `jsonb`, and SQLite would keep it: taking
    them out makes a stored value behave the same on both databases.
    """
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable_json(key): storable_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable_json(item) for item in value]
    return value
