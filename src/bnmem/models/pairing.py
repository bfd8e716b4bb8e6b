"""What a BN model and its other-norm twin share at initialization.

Every comparison in bnmem is paired: the BN model and the other-norm model of
a seed start from the same weights wherever both have the same layer. This
holds by construction: a model is built right after ``torch.manual_seed(seed)``
(:func:`bnmem.train.seeded_model`), its convolutions and linear layers are
created and initialized in the same order for every norm, and normalization
layers draw no random numbers (γ=1, β=0, or ``nn.Identity`` for ``none``).

The one deliberate exception is the ResNets' zero-initialized residual
branches: without normalization each branch's last convolution starts at zero
(so an unnormalized ResNet is trainable), where the BN model keeps its
Kaiming-initialized convolution and γ=1 (see :class:`bnmem.models.ResNet`).
:func:`init_pairing` measures what differs, from the models themselves, so
results can state it instead of assuming it.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

REFERENCE = "batch"


def _initial_state(arch: str, input_shape: tuple[int, ...], num_classes: int, norm: str, seed: int) -> dict:
    from bnmem.models import build_model

    with torch.random.fork_rng(devices=[]):  # leave the caller's random stream alone
        torch.manual_seed(seed)
        return build_model(arch, input_shape, num_classes, norm).state_dict()


def init_pairing(arch: str, input_shape: tuple[int, ...], num_classes: int, norms: Sequence[str],
                 seed: int = 0) -> dict[str, Any]:
    """Compare each norm's initial weights with the BN model's (same seed).

    Args:
        arch: architecture name.
        input_shape: (C, H, W).
        num_classes: logits.
        norms: the norms compared; the reference is ``batch`` when present, else the first.
        seed: the seed both are built from.

    Returns:
        ``{"reference", "per_norm": {norm: {"identical", "differ", "only_reference",
        "only_this"}}, "note"}``: counts of shared parameter tensors (norm
        statistics buffers excluded) with identical initial values, the names of
        shared tensors whose initial values differ, and how many tensors exist in
        one model only (normalization γ/β).
    """
    ref = REFERENCE if REFERENCE in norms else norms[0]
    states = {n: _initial_state(arch, input_shape, num_classes, n, seed) for n in dict.fromkeys([ref, *norms])}

    def params(state: dict) -> dict:
        return {k: v for k, v in state.items()
                if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))}

    base = params(states[ref])
    per_norm, notes = {}, []
    for norm in norms:
        if norm == ref:
            continue
        other = params(states[norm])
        shared = sorted(set(base) & set(other))
        differ = [k for k in shared if base[k].shape != other[k].shape or not torch.equal(base[k], other[k])]
        per_norm[norm] = {"identical": len(shared) - len(differ), "differ": differ,
                          "only_reference": len(set(base) - set(other)), "only_this": len(set(other) - set(base))}
        if differ:
            notes.append(f"{norm} vs {ref}: {len(differ)} of {len(shared)} shared weight tensors differ at init "
                         f"({', '.join(differ[:3])}{', ...' if len(differ) > 3 else ''}; zero-initialized residual "
                         f"branches without normalization)" if norm == "none" else
                         f"{norm} vs {ref}: {len(differ)} of {len(shared)} shared tensors differ at init")
        else:
            notes.append(f"{norm} vs {ref}: all {len(shared)} shared weight tensors identical at init")
    return {"reference": ref, "seed": seed, "per_norm": per_norm, "note": "; ".join(notes)}
