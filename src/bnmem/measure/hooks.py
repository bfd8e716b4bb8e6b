"""Forward hooks that are always removed: the measurements hook a model for one pass and hand it back unchanged."""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator
from contextlib import contextmanager

from torch.utils.hooks import RemovableHandle


@contextmanager
def removed_after(handles: Iterable[RemovableHandle]) -> Iterator[None]:
    """Run the body with the hooks of ``handles`` in place; remove them on the way out, also on an error."""
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def unreached(layers: Iterable[tuple[str, object]], seen: Container[str]) -> list[str]:
    """The names of ``layers`` (name, module) whose hook never ran (not in ``seen``)."""
    return [n for n, _ in layers if n not in seen]
