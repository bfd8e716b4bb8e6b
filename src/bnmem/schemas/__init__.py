"""JSON Schemas of bnmem's machine-readable outputs, shipped with the package.

* ``audit.schema.json``: ``audit.json`` (and, under ``$defs/exposure_columns``, ``exposure.csv``'s
  header). :data:`AUDIT_SCHEMA_VERSION` is written into every ``audit.json`` as ``schema_version``;
  a change that removes, renames or retypes a key the schema lists bumps its major number, and
  docs/audit-schema.md says what changed. Keys the schema does not list may come and go.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

AUDIT_SCHEMA = "audit.schema.json"
AUDIT_SCHEMA_VERSION = "1.1"


@lru_cache(maxsize=None)
def load_schema(name: str = AUDIT_SCHEMA) -> dict[str, Any]:
    """A shipped schema, parsed (``importlib.resources``: it works from a wheel as from the source tree)."""
    return json.loads(resources.files(__name__).joinpath(name).read_text(encoding="utf-8"))
