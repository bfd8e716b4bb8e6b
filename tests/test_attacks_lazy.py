"""bnmem.attacks imports its submodules on first use: every public name still resolves and is listed."""

from __future__ import annotations

import subprocess
import sys

import bnmem.attacks as attacks


def test_every_public_name_resolves_and_is_listed():
    listed = dir(attacks)
    for name in attacks.__all__:
        assert name in listed
        assert getattr(attacks, name) is not None
    # __all__ names exactly the lazily imported table, so neither can drift from the other.
    assert set(attacks.__all__) == set(attacks._WHERE)


def test_the_attack_specs_do_not_import_sklearn():
    code = "import sys, bnmem.attacks.spec; print('sklearn' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
