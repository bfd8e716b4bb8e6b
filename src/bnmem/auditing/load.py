"""Loading a user's model file, and checking that it accepts the data, for ``bnmem audit``.

Two formats are accepted:

* a whole pickled ``nn.Module`` (``torch.save(model, path)``). Unpickling runs
  code named in the file (``torch.load(..., weights_only=False)``): load only
  files you trust. The model's class must be importable here.
* a TorchScript file (``torch.jit.save(torch.jit.script(model), path)``): no
  Python classes needed; it cannot be re-instantiated for shadow models.

A ``state_dict`` (parameter tensors without the architecture) is not a model:
the error says what to save instead.
"""

from __future__ import annotations

import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bnmem.errors import BnmemError

PICKLED = "pickled nn.Module"
TORCHSCRIPT = "TorchScript"
SAVE_HINT = ("save the whole model with torch.save(model, path), or a TorchScript file with "
             "torch.jit.save(torch.jit.script(model), path)")
# Errors a forward pass raises when the input does not fit the model.
FORWARD_ERRORS = (RuntimeError, ValueError, TypeError, IndexError, AssertionError)


def is_torchscript_file(path: Path) -> bool:
    """TorchScript archives hold compiled code (``code/``, ``constants.pkl``); ``torch.save`` files do not."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
    return any("/code/" in n or n.endswith("constants.pkl") for n in names)


def is_scripted(model: nn.Module) -> bool:
    return isinstance(model, torch.jit.ScriptModule)


def _describe(obj: Any) -> str:
    if isinstance(obj, dict):
        tensors = sum(isinstance(v, torch.Tensor) for v in obj.values())
        if obj and tensors == len(obj):
            return f"a state_dict ({len(obj)} parameter tensors, no architecture)"
        return f"a dict with keys {sorted(map(str, obj))[:5]} (a checkpoint or state_dict, no architecture)"
    return f"a {type(obj).__module__}.{type(obj).__name__}"


def load_model_file(path: str | Path) -> tuple[nn.Module, str]:
    """Load a whole pickled ``nn.Module`` or a TorchScript module from ``path``, on the CPU.

    Args:
        path: the file.

    Returns:
        The model (in eval mode) and its format (:data:`PICKLED` or :data:`TORCHSCRIPT`).

    Raises:
        BnmemError: missing file, not a PyTorch file, a state_dict or other
            non-module object, or a pickled class that cannot be imported here.
    """
    path = Path(path)
    if not path.is_file():
        raise BnmemError(f"model file {path} does not exist")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit is deprecated in favour of torch.export
        if is_torchscript_file(path):
            try:
                model = torch.jit.load(str(path), map_location="cpu")
            except RuntimeError as e:
                raise BnmemError(f"{path} looks like TorchScript but cannot be loaded: {_first_line(e)}") from None
            return model.eval(), TORCHSCRIPT
        try:
            # weights_only=False unpickles arbitrary objects, which runs code: trusted files only.
            obj = torch.load(path, map_location="cpu", weights_only=False)
        except (AttributeError, ModuleNotFoundError, ImportError) as e:
            if "__main__" in str(e):  # the class lives in the script that saved it: no path makes it importable
                raise BnmemError(
                    f"{path} pickles a model whose class was defined in the script that saved it (__main__), which "
                    f"no other program can import; move the class into its own module (e.g. mynet.py, then "
                    f"`from mynet import Net` in the script), save again and audit from that module's folder; or "
                    f"save a TorchScript file: torch.jit.save(torch.jit.script(model), path)") from None
            raise BnmemError(
                f"{path} pickles a model whose class cannot be imported here ({_first_line(e)}); run the audit from "
                f"the folder of the class's module, keep the module beside the model file, or put it on PYTHONPATH; "
                f"or save a TorchScript file with torch.jit.save(torch.jit.script(model), path)"
            ) from None
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError, UnicodeDecodeError):
            # torch's own message ("invalid load key", "A load persistent id instruction was encountered")
            # describes its unpickler, not the user's file: say what the file is not, and what to save.
            raise BnmemError(f"{path} is not a PyTorch model file (neither torch.save nor torch.jit.save wrote it); "
                             f"{SAVE_HINT}") from None
    if isinstance(obj, torch.jit.ScriptModule):
        return obj.eval(), TORCHSCRIPT
    if not isinstance(obj, nn.Module):
        raise BnmemError(f"{path} holds {_describe(obj)}, not a model; {SAVE_HINT}")
    return obj.eval(), PICKLED


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _first_layer(model: nn.Module) -> tuple[str, nn.Module] | None:
    """The first convolution or linear layer in module order (works on TorchScript modules too)."""
    for name, m in model.named_modules():
        kind = getattr(m, "original_name", type(m).__name__)
        if kind.startswith(("Conv", "Linear", "LazyConv", "LazyLinear")):
            return name, m
    return None


def expected_input(model: nn.Module) -> str:
    """What the model's first layer expects, in words ('' when unknown)."""
    first = _first_layer(model)
    if first is None:
        return ""
    name, m = first
    kind = getattr(m, "original_name", type(m).__name__)
    if hasattr(m, "in_channels"):
        return f"its first layer '{name}' ({kind}) expects {m.in_channels} input channels"
    if hasattr(m, "in_features"):
        return f"its first layer '{name}' ({kind}) expects {m.in_features} input features"
    return ""


@torch.no_grad()
def check_inputs(model: nn.Module, x: torch.Tensor, num_classes: int, what: str) -> int:
    """Forward two examples (eval mode) and check the output is one score per class.

    Args:
        model: the model.
        x: a few inputs of the data.
        num_classes: classes of the data's labels.
        what: the data, in words (for messages), e.g. "digits".

    Returns:
        The number of outputs per example.

    Raises:
        BnmemError: the forward pass fails (expected vs given input shape), or
            the output has the wrong shape or fewer scores than classes.
    """
    probe = x[:2]
    was_training = model.training
    model.eval()
    try:
        out = model(probe)
    except FORWARD_ERRORS as e:
        expect = expected_input(model)
        flat = int(torch.tensor(probe.shape[1:]).prod()) if probe.ndim > 1 else 1
        raise BnmemError(
            f"the model does not accept {what} inputs: given a batch of shape {tuple(probe.shape)} "
            f"({'x'.join(map(str, probe.shape[1:]))} per example, {flat} values), it failed with: {_first_line(e)}"
            + (f"; {expect}" if expect else "")
        ) from None
    finally:
        model.train(was_training)
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != probe.shape[0]:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise BnmemError(f"the model must return logits of shape (batch, classes); it returned {shape}")
    if out.shape[1] < num_classes:
        raise BnmemError(f"the model outputs {out.shape[1]} scores per example but {what} has {num_classes} classes; "
                         f"audit it on the data it was trained on (labels 0-{out.shape[1] - 1}: for an image folder, "
                         f"one class folder per output), or give the model that predicts these {num_classes} classes")
    return int(out.shape[1])


def first_layer_channels(model: nn.Module) -> int | None:
    """Input channels of the model's first convolution (None when its first layer is not one)."""
    first = _first_layer(model)
    return None if first is None else getattr(first[1], "in_channels", None)
