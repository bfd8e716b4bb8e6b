"""``--train-fn module:function`` / ``bnmem.audit(train_fn=...)``: the shadow copies trained by your own loop.

bnmem's recipe flags (optimizer, schedule, augmentation) approximate a training loop; a custom one (label
smoothing, mixed precision, a hand-written schedule, your own augmentation) is reproduced exactly by
handing the audit the function that trains it. It is called once per shadow copy as
:data:`bnmem.shadow.copies.TRAIN_FN_SIGNATURE`::

    def train(model, train_dataset, seed):
        # model: a fresh, re-initialized copy of your architecture, in train mode, on --device
        # train_dataset: a torch TensorDataset of the copy's half of your training data (inputs as the
        #                audit reads them, labels int64, on the CPU)
        # seed: the copy's seed (torch.manual_seed(seed) has already been called)
        ...
        return model  # the trained model

with bnmem's member split (every example IN for exactly half the copies) and seeds. The copies are then
queried and attacked as always, and the resemblance check (copies' training accuracy beside your
model's) still applies. The module is found as the model's module is: the command line puts the model
file's folder and the working directory on the import path.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any, Callable

from bnmem.errors import BnmemError

EXAMPLE = "mytrain:train_copy"


def check_spec(spec: str) -> None:
    """A 'module:function' text (the option's validator; the import comes later).

    Raises:
        ValueError: no colon, or an empty side.
    """
    module, sep, name = spec.partition(":")
    if not sep or not module.strip() or not name.strip() or ":" in name:
        raise ValueError(f"must be 'module:function' (e.g. {EXAMPLE}), got {spec!r}")


def add_import_paths(*folders: str | Path) -> None:
    """Put ``folders`` on the import path, after what is there (the model's module and a training function's
    module are found where the README says: the model file's folder, the working directory)."""
    for folder in folders:
        text = str(Path(folder).resolve())
        if text not in sys.path:
            sys.path.append(text)


def load_spec(spec: str) -> Callable[..., Any]:
    """The function named by 'module:function' (a dotted name after the colon reaches into a class).

    Raises:
        BnmemError: the module cannot be imported, or has no such callable (one line each).
    """
    check_spec_line(spec)
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise BnmemError(f"--train-fn {spec}: cannot import {module_name} ({e}); run the audit from the folder "
                         f"that holds {module_name.split('.')[0]}.py (or beside the model file), or put it on "
                         "PYTHONPATH") from None
    except Exception as e:  # noqa: BLE001 - the user's module failed while importing: one line, not a traceback
        raise BnmemError(f"--train-fn {spec}: importing {module_name} failed: {type(e).__name__}: {e}") from None
    obj: Any = module
    for part in name.split("."):
        obj = getattr(obj, part, None)
    if not callable(obj):
        raise BnmemError(f"--train-fn {spec}: {module_name} has no function {name!r}")
    return obj


def check_spec_line(spec: str) -> None:
    try:
        check_spec(spec)
    except ValueError as e:
        raise BnmemError(f"--train-fn {e}") from None


def resolve(train_fn: str | Callable[..., Any]) -> tuple[Callable[..., Any], str, str]:
    """The training function, its 'module:function' name and what identifies its code (the SHA-256 of its source
    file: :func:`bnmem.shadow.copies.function_identity`).

    Raises:
        BnmemError: a bad spec, an import that fails, or a function that cannot take
            ``(model, train_dataset, seed)``.
    """
    from bnmem.shadow.copies import TRAIN_FN_SIGNATURE, function_identity

    fn = load_spec(train_fn) if isinstance(train_fn, str) else train_fn
    if not callable(fn):
        raise BnmemError(f"train_fn must be a function {TRAIN_FN_SIGNATURE} or 'module:function', "
                         f"got {type(fn).__name__}")
    name, digest = function_identity(fn)
    if isinstance(train_fn, str):
        name = train_fn
    try:
        inspect.signature(fn).bind(None, None, None)
    except TypeError:
        raise BnmemError(f"--train-fn {name} must take (model, train_dataset, seed): it is {TRAIN_FN_SIGNATURE}; "
                         f"{name} takes {inspect.signature(fn)}") from None
    except ValueError:  # no signature to read (a builtin): it is called as it is
        pass
    return fn, name, digest
