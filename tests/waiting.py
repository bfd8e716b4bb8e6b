"""Waiting on events in tests without wall-clock deadlines (docs/testing.md, "A suite that holds under load").

A test waits for the event it needs (a file appears, a process exits, a call returns),
however long a busy machine takes. Only a hang guard bounds the wait: far longer than
any run on a loaded machine, it ends a wait that would never end and says so, with the
time waited. It is not a timing check: no test asserts that something was fast.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Any, Callable

# One hour by default; BNMEM_TEST_HANG_GUARD_S changes it (e.g. on a very slow CI runner).
HANG_GUARD_S = float(os.environ.get("BNMEM_TEST_HANG_GUARD_S", "3600"))


class Hung(AssertionError):
    """The awaited event did not happen within the hang guard (the code hangs, or the machine is stuck)."""


def _hung(what: str, waited: float) -> Hung:
    return Hung(f"hang guard: {what} has not happened after {waited:.0f} s (BNMEM_TEST_HANG_GUARD_S="
                f"{HANG_GUARD_S:.0f}); this bounds a hang, it does not check speed")


def wait_until(condition: Callable[[], bool], what: str, proc: subprocess.Popen | None = None,
               poll_s: float = 0.02) -> float:
    """Poll ``condition`` until it holds; return the seconds waited.

    Raises:
        AssertionError: ``proc`` exited before the event (its exit code and stderr tail).
        Hung: the hang guard ran out.
    """
    start = time.monotonic()
    while not condition():
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read()[-2000:] if proc.stderr else ""
            raise AssertionError(f"the process exited ({proc.returncode}) before {what}: {err}")
        waited = time.monotonic() - start
        if waited > HANG_GUARD_S:
            raise _hung(what, waited)
        time.sleep(poll_s)
    return time.monotonic() - start


def guarded(fn: Callable[[], Any], what: str) -> Any:
    """``fn()`` in a thread under the hang guard: its result, or its exception re-raised here."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test's thread
            box["error"] = e

    start = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    if thread.is_alive():
        raise _hung(what, time.monotonic() - start)
    if "error" in box:
        raise box["error"]
    return box.get("value")
