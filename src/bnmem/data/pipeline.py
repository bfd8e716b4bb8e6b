"""From a :class:`DataConfig` to a normalized :class:`OutlierDataset`.

Order of the steps (each with its own random stream of ``cfg.seed``):

1. load the raw source;
2. ``train_size``: keep a seeded subset of the training split;
3. ``heldout-classes``: drop the held-out classes from train and test and
   relabel the rest 0..k-1 (also when ``ood`` is 0, so a clean baseline
   predicts the same classes as its corrupted counterparts);
4. ``val_fraction``: hold out a seeded share of the in-distribution pool as
   the validation split, with its clean labels (it is neither trained on nor
   a LiRA candidate; the test split is never touched);
5. flip labels among the remaining in-distribution examples;
6. append OOD images with random labels;
7. normalize train, validation and test with the per-channel mean/std of the
   final training split, outliers included.

With ``val_fraction`` 0 (the default) steps 1-3 and 5-7 give the same tensors
as before the validation split existed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from bnmem.data import corruption as C
from bnmem.data.dataset import OutlierDataset
from bnmem.data.sources import DATASETS, RawData, dataset_shape, default_data_root, load_source
from bnmem.errors import BnmemError

if TYPE_CHECKING:  # annotations only: data does not depend on the config module
    from bnmem.config import DataConfig

OOD_NOISE = "noise"
OOD_HELDOUT = "heldout-classes"


def heldout_classes(cfg: DataConfig) -> list[int] | None:
    """The classes ``cfg`` holds out, or None when ``ood_source`` is not ``heldout-classes``.

    Args:
        cfg: data config.

    Returns:
        Sorted class ids, or None.

    Raises:
        BnmemError: unknown ``ood_source``, bad ``heldout_classes``, or
            ``heldout_classes`` given with another ``ood_source``.
    """
    _check_ood_source(cfg)
    if cfg.ood_source != OOD_HELDOUT:
        if cfg.heldout_classes is not None:
            # Silently ignoring them would run a different experiment than the one asked for.
            raise BnmemError(
                f"heldout_classes only applies with ood_source='{OOD_HELDOUT}' (ood_source is {cfg.ood_source!r})"
            )
        return None
    _, n_classes = dataset_shape(cfg.dataset)
    chosen = cfg.heldout_classes if cfg.heldout_classes is not None else C.default_heldout_classes(n_classes)
    return C.check_heldout_classes(chosen, n_classes)


def model_shape(cfg: DataConfig) -> tuple[tuple[int, int, int], int]:
    """Input shape and number of classes the models of ``cfg`` see, without loading data.

    Differs from :func:`dataset_shape` only when classes are held out.

    Args:
        cfg: data config.

    Returns:
        ``((C, H, W), num_classes)``.

    Raises:
        BnmemError: as :func:`heldout_classes`.
    """
    shape, n_classes = dataset_shape(cfg.dataset)
    held = heldout_classes(cfg)
    return shape, n_classes - (len(held) if held else 0)


def _check_ood_source(cfg: DataConfig) -> None:
    src = cfg.ood_source
    if src in (OOD_NOISE, OOD_HELDOUT):
        return
    if src not in DATASETS:
        raise BnmemError(
            f"unknown ood_source {src!r}; choose '{OOD_NOISE}', '{OOD_HELDOUT}' or a dataset: {', '.join(DATASETS)}"
        )
    if src == cfg.dataset:
        raise BnmemError(f"ood_source {src!r} is the training dataset itself; pick another dataset")
    own, other = dataset_shape(cfg.dataset)[0], dataset_shape(src)[0]
    if own != other:
        raise BnmemError(
            f"ood_source {src!r} has images of shape {other}, but {cfg.dataset} has {own}; "
            f"pick a dataset with the same image shape"
        )


def load_dataset(cfg: DataConfig) -> OutlierDataset:
    """Load, corrupt and normalize the data of one experiment.

    Args:
        cfg: data config. ``cfg.seed`` drives every random choice; the same
            config gives identical tensors.

    Returns:
        The dataset with its outlier masks; images are float32 NCHW tensors,
        labels int64 tensors.

    Raises:
        BnmemError: bad rates or seed, unknown or incompatible ``ood_source``,
            bad held-out classes or ``train_size``, too few OOD images, or any
            data-loading problem (see :func:`bnmem.data.sources.load_source`).
    """
    C.check_rate(cfg.label_noise, "label_noise")
    C.check_rate(cfg.ood, "ood")
    C.make_rng(cfg.seed, 0)  # validates the seed before any slow loading
    held = heldout_classes(cfg)
    root = Path(cfg.data_root).expanduser() if cfg.data_root is not None else default_data_root()

    raw = load_source(cfg.dataset, root, cfg.download)
    x_tr, y_tr, src, x_te, y_te, kept, pool = _in_distribution(cfg, raw, held)
    num_classes = raw.num_classes if kept is None else len(kept)
    val_pos = C.validation_positions(len(y_tr), cfg.val_fraction, C.make_rng(cfg.seed, C.STREAM_VAL))
    x_val, y_val, val_src = x_tr[val_pos], np.asarray(y_tr, dtype=np.int64)[val_pos], src[val_pos]
    if len(val_pos):
        rest = np.setdiff1d(np.arange(len(y_tr)), val_pos)
        x_tr, y_tr, src = x_tr[rest], y_tr[rest], src[rest]
    n_in = len(y_tr)

    y_flipped, noisy_in = C.flip_labels(y_tr, cfg.label_noise, num_classes, C.make_rng(cfg.seed, C.STREAM_FLIP))
    rng = C.make_rng(cfg.seed, C.STREAM_OOD)
    x_ood, ood_from = _ood_images(cfg, x_tr, C.ood_count(cfg.ood, n_in), held, pool, root, rng)
    x_all, y_all, is_ood = C.append_ood(x_tr, y_flipped, x_ood, num_classes, rng)
    is_noisy = np.concatenate([noisy_in, np.zeros(len(x_ood), dtype=bool)])
    y_orig = np.concatenate([np.asarray(y_tr, dtype=np.int64), np.full(len(x_ood), -1, dtype=np.int64)])

    mean, std = _channel_stats(x_all)
    x_all, x_te, x_val = _normalize(x_all, x_te, x_val, mean, std)

    info = {
        "source": raw.source,
        "data_root": None if cfg.dataset == "digits" else str(root),
        "label_noise": cfg.label_noise,
        "ood": cfg.ood,
        "ood_source": cfg.ood_source,
        "ood_from": ood_from,
        "n_in": n_in,
        "train_size": cfg.train_size,
        "heldout_classes": held,
        "kept_classes": kept,
        "val_fraction": cfg.val_fraction,
        "n_val": len(val_pos),
    }
    return OutlierDataset(
        name=cfg.dataset,
        x_train=_tensor(x_all),
        y_train=torch.from_numpy(np.ascontiguousarray(y_all, dtype=np.int64)),
        y_train_orig=y_orig,
        is_noisy=is_noisy,
        is_ood=is_ood,
        x_test=_tensor(x_te),
        y_test=torch.from_numpy(np.array(y_te, dtype=np.int64)),
        num_classes=num_classes,
        input_shape=tuple(int(s) for s in x_all.shape[1:]),
        mean=mean,
        std=std,
        seed=cfg.seed,
        info=info,
        x_val=_tensor(x_val),
        y_val=torch.from_numpy(np.ascontiguousarray(y_val, dtype=np.int64)),
        source_index=np.concatenate([src, np.full(len(x_ood), -1, dtype=np.int64)]),
        val_source_index=val_src,
    )


def _in_distribution(cfg: DataConfig, raw: RawData, held: list[int] | None) -> tuple:
    """Steps 2-3: the seeded ``train_size`` subset, then the held-out classes dropped from train and test.

    Returns:
        ``(x_train, y_train, source positions, x_test, y_test, kept classes or None, held-out pool or None)``;
        labels are relabelled 0..k-1 when classes are held out.

    Raises:
        BnmemError: no in-distribution training example is left.
    """
    x_tr, y_tr, x_te, y_te = raw.x_train, raw.y_train, raw.x_test, raw.y_test
    # Position of every kept example in the raw training split (provenance of the splits).
    src = np.arange(len(y_tr), dtype=np.int64)
    if cfg.train_size is not None:
        keep = C.subsample_indices(len(y_tr), cfg.train_size, C.make_rng(cfg.seed, C.STREAM_SUBSAMPLE))
        x_tr, y_tr, src = x_tr[keep], y_tr[keep], src[keep]
    kept: list[int] | None = None
    pool = None
    if held is not None:
        kept = [c for c in range(raw.num_classes) if c not in held]
        pool = x_tr[np.isin(y_tr, held)]
        src = src[np.isin(y_tr, kept)]
        x_tr, y_tr = C.keep_classes(x_tr, y_tr, kept)
        x_te, y_te = C.keep_classes(x_te, y_te, kept)
    if len(y_tr) == 0:
        raise BnmemError(f"no in-distribution training examples left in {cfg.dataset}; raise train_size")
    return x_tr, y_tr, src, x_te, y_te, kept, pool


def _ood_images(cfg: DataConfig, x_tr: np.ndarray, n_ood: int, held: list[int] | None, pool: np.ndarray | None,
                root: Path, rng: np.random.Generator) -> tuple[np.ndarray, str | None]:
    """Step 6's images: ``n_ood`` OOD images from ``cfg.ood_source`` (drawn with ``rng``), and where they came from.

    Raises:
        BnmemError: the other dataset's images have another shape, or there are too few images to draw from.
    """
    if n_ood == 0:
        return np.empty((0, *x_tr.shape[1:]), dtype=np.float32), None
    if cfg.ood_source == OOD_NOISE:
        return (C.noise_images(n_ood, x_tr, rng),
                "gaussian noise with the per-channel mean/std of the clean training images")
    if held is not None:
        x_ood = C.pick_ood(pool, n_ood, rng, f"the held-out classes {held}")
        return x_ood, f"training images of {cfg.dataset} classes {held}"
    other = load_source(cfg.ood_source, root, cfg.download)
    if other.x_train.shape[1:] != x_tr.shape[1:]:
        raise BnmemError(
            f"ood_source {cfg.ood_source!r} has images of shape {other.x_train.shape[1:]}, "
            f"but {cfg.dataset} has {x_tr.shape[1:]}"
        )
    x_ood = C.pick_ood(other.x_train, n_ood, rng, f"{cfg.ood_source}'s training split")
    return x_ood, f"training images of {cfg.ood_source} ({other.source})"


def _normalize(x_all: np.ndarray, x_te: np.ndarray, x_val: np.ndarray, mean: np.ndarray, std: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 7: train, test and validation images with the training split's per-channel mean/std."""
    # x_all is a fresh array from concatenate: normalize it in place to spare
    # a copy of a CIFAR-sized split; x_te may be a cached read-only source.
    x_all -= mean[None, :, None, None]
    x_all /= std[None, :, None, None]
    x_te = (x_te - mean[None, :, None, None]) / std[None, :, None, None]
    x_val = (x_val - mean[None, :, None, None]) / std[None, :, None, None]
    return x_all, x_te, x_val


def _channel_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean/std (float64 accumulation), returned as the float32 values applied."""
    mean = x.mean(axis=(0, 2, 3), dtype=np.float64)
    std = x.std(axis=(0, 2, 3), dtype=np.float64)
    # A constant channel would divide by zero; leave it centred but unscaled.
    std = np.where(std > 0, std, 1.0)
    return mean.astype(np.float32), std.astype(np.float32)


def _tensor(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
