"""Audit a user's own model: normalization layers, BN γ/σ, gradient-norm outliers, accuracy, membership risk.

Python::

    import bnmem
    result = bnmem.audit(model, (x_train, y_train), (x_test, y_test), out="runs/audit")
    print(result.markdown)

Command line: ``bnmem audit --model MODEL.pt --dataset digits --out runs/audit``
(see :mod:`bnmem.cli.commands.audit`). Both write ``audit.json`` and ``audit.md``.

What it measures, on the model as given (eval mode, BN with its running statistics):

* the normalization layers (:func:`bnmem.models.norms.norm_layers`);
* per BN layer, |γ|/σ per channel with σ the running estimate (and, for a
  regular ``nn.Module``, the σ of one training batch), the median and the
  fraction of channels above 1 (:mod:`bnmem.measure.gamma_sigma`);
* the per-sample gradient norm of every training example (eval definition,
  float64; :mod:`bnmem.measure.gradnorms`), its top-k examples and, when the
  corrupted samples are known, how many of those are corrupted;
* train/test accuracy (and the fit of flipped/OOD labels when known);
* optionally (``shadow_models`` M > 0), membership leakage of the *training recipe*: M fresh
  copies of the architecture train on seeded halves of the data (every example IN for exactly
  half), and LiRA/RMIA run leave-one-out over them (:mod:`bnmem.attacks`), as the lira lens
  does; pooled per group (whole set, known outliers, largest gradient norms) with intervals
  (:mod:`bnmem.auditing.leakage`), the copies' accuracy beside the model's
  (:mod:`bnmem.auditing.calibration`), optionally with and without the γ/σ regularizer
  (:mod:`bnmem.auditing.compare`);
* the answer (:mod:`bnmem.auditing.report`): a level from the measured attacks, one plain
  paragraph, findings with levels (the BN signals explain, they do not set the level) and
  recommendations that name existing commands and APIs.

Every input is checked before anything is written into ``out``.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch import nn

from bnmem import io
from bnmem.auditing.data import as_dataset, masks_known
from bnmem.auditing.exposure import EXPOSURE_FILE
from bnmem.auditing.gate import on_target
from bnmem.auditing.target import add_to_risk, measure_target_and_slices
from bnmem.auditing.load import TORCHSCRIPT, check_inputs, is_scripted
from bnmem.auditing.calibration import match_epochs, model_checks, step_matched
from bnmem.auditing.compare import gs_reg_comparison
from bnmem.auditing.membership import RAW, check_shadow_request, shadow_copies, shadow_membership
from bnmem.auditing.sections import (
    accuracy_section,
    gamma_sigma_section,
    gradnorm_section,
    model_device,
    norm_layer_table,
)
from bnmem.config import DataConfig, ShadowCopies, StrictModel, TrainConfig
from bnmem.data.dataset import OutlierDataset
from bnmem.data.image_folder import ImageFolderConfig
from bnmem.measure.memory import parse_size
from bnmem.errors import BnmemError
from bnmem.names import ENVIRONMENT_FILE
from bnmem.schemas import AUDIT_SCHEMA_VERSION


class AuditConfig(StrictModel):
    """What ``bnmem audit`` reads besides the model: the data it was trained on, the shadow recipe.

    ``folder`` (a practitioner's ImageFolder tree) replaces ``data`` (a bnmem dataset) when given.
    """

    data: DataConfig = DataConfig()
    folder: ImageFolderConfig | None = None
    train: TrainConfig = TrainConfig()
    outliers: Path | None = None  # with ``folder``: a CSV of rare/atypical training files (correctly labelled)
    non_members: Path | None = None  # with ``folder``: held-out images the model never saw (bnmem.auditing.target)


@dataclass
class AuditResult:
    """What :func:`audit` found.

    Attributes:
        data: the full result (also ``audit.json``).
        markdown: the human-readable report (also ``audit.md``).
        out: where the files went (None when not written).
        files: the files written into ``out``, in the order they were written.
        mlflow: where the audit was logged with ``mlflow=True`` (``tracking_uri``, ``experiment_id``, ``run_id``).
    """

    data: dict[str, Any]
    markdown: str
    out: Path | None = None
    files: list[str] = field(default_factory=list)
    mlflow: dict[str, str] | None = None

    @property
    def risk(self) -> dict[str, Any]:
        return self.data["risk"]

    @property
    def gate(self) -> dict[str, Any] | None:
        """The CI gate's outcome (``fail_at`` given; :mod:`bnmem.auditing.gate`): ``state``, ``exit_code``, ``text``."""
        return self.data["risk"].get("gate")


def run_audit(model: nn.Module, train_data: Any, test_data: Any, shadow: Any, train: Any, options: Any,
              out: str | Path | None, fields: dict[str, Any],
              notices: list[dict[str, str]] | None = None) -> AuditResult:
    """:func:`bnmem.audit`'s body (its arguments, as that function received them; documented there).

    ``notices``: warnings of the caller's own (``{"kind", "text"}``; the command line's recipe defaults), printed
    with the audit's and recorded with them, before any copy trains."""
    from bnmem.auditing.options import AuditData, resolve
    from bnmem.auditing.report import frontier_citation

    copies, train_cfg, opts, masks = resolve(shadow, train, options, fields)
    if isinstance(train_data, AuditData):
        masks = {**{k: getattr(train_data, k) for k in ("noisy_mask", "ood_mask", "rare_mask", "non_members")},
                 **masks}
        train_data, test_data = train_data.train, train_data.test if test_data is None else test_data
    frontier = frontier_citation(opts.defenses) if opts.defenses is not None else None  # before any work
    ds = as_dataset(train_data, test_data, masks.get("noisy_mask"), masks.get("ood_mask"))
    rare = check_rare(masks.get("rare_mask"), ds.n_train)
    held = check_held_out(masks.get("non_members"), ds, opts.fail_at)
    if copies.wanted or opts.canaries:
        check_shadow_request(model, copies)  # before any slow work (a copy of the architecture must train)
    check_outputs_wanted(opts, copies, out)
    user_fn = user_training(opts, copies)
    if opts.max_memory is not None:
        parse_size(opts.max_memory)
    n_outputs, acc, warnings = checked_model(model, ds, rare)
    warnings += list(notices or [])
    out = io.ensure_dir(out) if out is not None else None  # only now: every input has been checked
    with shadow_executor(opts.executor, opts.workers, opts.progress) as ex:
        result, norms = measure(model, ds, n_outputs, top_k=opts.top_k, max_examples=opts.max_examples,
                                seed=opts.seed, max_memory=opts.max_memory, source=opts.source, rare=rare)
        result["accuracy"], result["warnings"], result["membership"] = acc, warnings, None
        for w in warnings:  # one line each, once every input has passed its checks and before any copy trains
            print(f"bnmem: warning: {w['text']}", file=sys.stderr, flush=True)
        if copies.shadow_models:
            shadow_sections(result, model, ds, train_cfg, copies, out, opts.progress, ex, rare=rare, held=held,
                            user_fn=user_fn)
        measure_target_and_slices(result, model, ds, train_cfg, held, opts.seed)
    if opts.canaries:
        result["one_run"] = one_run_section(model, ds, train_cfg, opts, user_fn)
    return finish(result, norms, out, frontier, opts, ds)


def one_run_section(model: nn.Module, ds: OutlierDataset, train: TrainConfig, opts: Any,
                    user_fn: tuple[Any, str, str | None] | None = None) -> dict[str, Any]:
    """The one-run audit of the recipe (:mod:`bnmem.auditing.one_run`): one fresh copy trains with the recipe as
    given (the whole training set, as your model did; or by your training function) plus the canaries."""
    from bnmem.auditing.one_run import audit_recipe_once, fn_trainer, plain_trainer
    from bnmem.shadow.copies import CopyTraining

    if opts.progress:
        print(f"one-run audit: training one copy with {opts.canaries} canaries", file=sys.stderr, flush=True)
    trainer = plain_trainer(train, opts.seed, opts.progress) if user_fn is None else \
        fn_trainer(CopyTraining(train, *user_fn), opts.seed)
    return audit_recipe_once(model, ds, trainer, opts.canaries, seed=opts.seed, beta=opts.one_run_beta,
                             device=train.device)


def user_training(opts: Any, copies: ShadowCopies) -> tuple[Any, str, str | None] | None:
    """``train_fn`` resolved (the function, its name, its source's SHA-256), its combinations checked; None
    without one (:mod:`bnmem.auditing.train_fn`).

    Raises:
        BnmemError: a bad spec or function, no copies to train, or an option that needs bnmem's recipe.
    """
    if opts.train_fn is None:
        return None
    if not copies.shadow_models and not opts.canaries:
        raise BnmemError("--train-fn trains the shadow copies: give --shadow-models too (e.g. 8)")
    if copies.match_accuracy:
        raise BnmemError("--match-accuracy lengthens bnmem's recipe; with --train-fn your function decides how long "
                         "a copy trains: drop --match-accuracy")
    if copies.compare_gs_reg is not None:
        raise BnmemError("--compare-gs-reg adds the γ/σ regularizer to bnmem's recipe, not to your --train-fn: add "
                         "bnmem.GammaSigmaPenalty to your function and audit that instead")
    from bnmem.auditing.train_fn import resolve as resolve_train_fn

    return resolve_train_fn(opts.train_fn)


def check_outputs_wanted(opts: Any, copies: ShadowCopies, out: str | Path | None) -> None:
    """The outputs asked for can be made: one line naming the fix, before any work.

    Raises:
        BnmemError: ``fail_at`` without shadow copies (a gate would have nothing to read), ``mlflow`` without
            MLflow installed or without ``out`` (its artifacts are the audit's files), a model card that
            cannot take the section.
    """
    if opts.mlflow:
        from bnmem.auditing.tracking import require_mlflow

        require_mlflow()
        if out is None:
            raise BnmemError("mlflow=True logs the audit's files as artifacts: give out= too")
    if opts.fail_at is not None and not copies.shadow_models and not on_target(opts.fail_at):
        raise BnmemError("--fail-at gates on the membership attacks: give --shadow-models too (e.g. 8), or gate on "
                         "your model itself with --non-members and --fail-at target:...")
    if opts.model_card is not None:
        from bnmem.auditing.model_card import check_card

        check_card(opts.model_card)


def check_held_out(non_members: Any, ds: OutlierDataset, fail_at: str | None) -> Any:
    """The held-out set as a :class:`~bnmem.auditing.target.HeldOut` (None when not given), and a gate that can read
    what it names (a class the data have; ``target:`` only with a held-out set).

    Raises:
        BnmemError: malformed non-members, a class the data lack, ``target:`` without non-members.
    """
    from bnmem.auditing.gate import check_budget_slice
    from bnmem.auditing.slices import class_names

    check_budget_slice(fail_at, class_names(ds))
    if non_members is None:
        if on_target(fail_at):
            raise BnmemError(f"--fail-at {fail_at!r} gates on your model itself: give the held-out set it never saw "
                             "with --non-members FOLDER (non_members=(x, y) in Python)")
        return None
    from bnmem.auditing.target import as_held_out

    return as_held_out(non_members, ds)


def checked_model(model: nn.Module, ds: OutlierDataset,
                  rare: np.ndarray | None) -> tuple[int, dict[str, Any], list[dict[str, str]]]:
    """The model in eval mode against the data: its output count (checked), its accuracy, and its flags."""
    model.eval()
    n_outputs = check_inputs(model, ds.x_train[:2].to(model_device(model)), ds.num_classes, ds.name)
    acc = accuracy_section(model, ds, rare)
    return n_outputs, acc, model_checks(acc, ds, n_outputs)


def check_rare(mask: np.ndarray | None, n: int) -> np.ndarray | None:
    """``rare_mask`` as a bool array of the training set's length (None when not given or empty).

    Raises:
        BnmemError: a mask of another shape or with values other than 0/1.
    """
    if mask is None:
        return None
    arr = np.asarray(mask)
    if arr.shape != (n,) or not (arr.dtype == bool or np.isin(arr, (0, 1)).all()):
        raise BnmemError(f"rare_mask must be a boolean array of shape ({n},), got {arr.dtype} {arr.shape}")
    return arr.astype(bool) if arr.any() else None


def shadow_sections(result: dict[str, Any], model: nn.Module, ds: OutlierDataset, train: TrainConfig,
                    copies: ShadowCopies, out: Path | None, progress: bool, executor: Any, *,
                    rare: np.ndarray | None, held: Any = None,
                    user_fn: tuple[Any, str, str | None] | None = None) -> None:
    """Membership over the shadow copies (their length calibrated first, unless your own function trains them),
    and the regularizer comparison."""
    from bnmem.shadow.copies import CopyTraining

    exposed = np.asarray([r["index"] for r in result["gradient_norms"]["top_k"]], dtype=np.int64)
    steps = None
    if user_fn is not None:  # the function decides how long a copy trains; the resemblance check still applies
        mem = shadow_membership(model, ds, copies.shadow_models, train, out, progress, executor,
                                extra_groups(exposed, rare, ds.n_train),
                                held_out=(held.x, held.y) if held is not None else None,
                                training=CopyTraining(train, *user_fn))
        mem.update({"steps": None, "matched": None,
                    "train": {"train_fn": user_fn[1], **train.model_dump(mode="json", include={
                        "device", "threads", "augment"})}})
        result["membership"] = mem
        return
    if copies.match_steps:
        train, steps = step_matched(train, ds.n_train)
    target, m = result["accuracy"]["train_acc"], copies.shadow_models
    calibrate = (lambda cfg: match_epochs(model, ds, cfg, target, m, copies.max_epochs)) if copies.match_accuracy \
        else (lambda cfg: (cfg, None))
    base = train
    train, matched = calibrate(base)
    groups = extra_groups(exposed, rare, ds.n_train)
    mem = shadow_membership(model, ds, m, train, out, progress, executor, groups,
                            held_out=(held.x, held.y) if held is not None else None)
    mem.update({"steps": steps, "matched": matched})
    result["membership"] = mem
    if copies.compare_gs_reg is not None:
        result["gs_reg_comparison"] = gs_reg_comparison(mem, model, ds, base, copies.compare_gs_reg, out, progress,
                                                        executor, groups, calibrate, target)


def extra_groups(exposed: np.ndarray, rare: np.ndarray | None, n: int) -> dict[str, np.ndarray]:
    """The attack groups besides the data's own outlier masks: the examples with the largest gradient norms on the
    model (the --top-k; "most exposed" is exposure.csv's ranking, not this group) and the rare ones."""
    # The key is audit.json's (schema 1.x); the reports name the group by its gradient norms.
    groups = {"most_exposed": np.isin(np.arange(n), exposed)} if len(exposed) else {}
    return {**groups, **({"rare": rare} if rare is not None else {})}


@contextmanager
def shadow_executor(executor: Any, workers: int, progress: bool) -> Iterator[Any]:
    """``executor`` as given, or a local pool of ``workers`` processes (closed on exit), or None."""
    if executor is not None or workers <= 1:
        yield executor
        return
    from bnmem.executors import get_executor

    ex = get_executor("local", progress=progress, workers=workers)
    try:
        yield ex
    finally:
        ex.close()


def measure(model: nn.Module, ds: OutlierDataset, n_outputs: int, *, top_k: int, max_examples: int | None,
            seed: int, max_memory: int | str | None, source: dict[str, Any] | None,
            rare: np.ndarray | None = None) -> tuple[dict[str, Any], np.ndarray]:
    """The sections measured on the model itself: layers, γ/σ, gradient norms (accuracy: :func:`audit`)."""
    from bnmem.formatting import count_text

    layers = norm_layer_table(model)
    n_params = int(sum(p.numel() for p in model.parameters()))
    result: dict[str, Any] = {
        "schema_version": AUDIT_SCHEMA_VERSION,  # bnmem/schemas/audit.schema.json
        "model": {
            "class": getattr(model, "original_name", type(model).__name__),
            "format": TORCHSCRIPT if is_scripted(model) else "nn.Module",
            "parameters": n_params,
            "parameters_text": count_text(n_params),
            "outputs": n_outputs,
            **(source or {}),
        },
        "data": {**{k: v for k, v in ds.summary().items() if k != "files"}, "outliers_known": masks_known(ds),
                 "n_rare": int(rare.sum()) if rare is not None else 0},
        "norm_layers": layers,
        "gamma_sigma": gamma_sigma_section(model, ds, seed) if any(r["batchnorm"] for r in layers) else None,
    }
    result["gradient_norms"], norms = gradnorm_section(model, ds, top_k, max_examples, seed, max_memory, rare)
    return result, norms


def finish(result: dict[str, Any], norms: np.ndarray, out: Path | None, frontier: dict[str, Any] | None,
           opts: Any, ds: OutlierDataset) -> AuditResult:
    """The risk summary, the gate and the report, written into ``out`` (the audit's last step; audit.json last)."""
    from bnmem.auditing.markdown import to_markdown
    from bnmem.auditing.report import risk_summary

    table = exposure_table(result, ds, norms)
    for mem in (result.get("membership"), (result.get("gs_reg_comparison") or {}).get("membership")):
        if mem:
            mem.pop(RAW, None)  # the raw scores served the table and the paired comparison; they are not written
    result["risk"] = risk_summary(result)
    add_to_risk(result)  # the shipped model's own leakage (held-out set) and the slices
    if frontier is not None:
        result["risk"]["frontier"] = frontier
        result["risk"]["recommendations"].append(frontier["text"])
    if result.get("one_run"):
        from bnmem.auditing.one_run import one_run_text
        from bnmem.auditing.report import ATTACK_NAMES

        eps = result["risk"].get("epsilon")
        names = {g["group"]: g["name"] for g in result["risk"]["groups"]}
        multi = {"eps_lb": eps["eps_lb"], "attack": eps["attack"], "group": eps["group"],
                 "where": f"{ATTACK_NAMES[eps['attack']]} on {names.get(eps['group'], eps['group'])}"} if eps else None
        result["one_run"].update({"multi_run": multi, "text": one_run_text(result["one_run"], multi)})
    if opts.fail_at is not None:
        from bnmem.auditing.gate import evaluate_gate

        result["risk"]["gate"] = evaluate_gate(result, opts.fail_at)
    markdown = to_markdown(result)
    files: list[str] = []
    if out is not None:
        io.write_npy(out / "gradient_norms.npy", norms)
        if table is not None:
            io.write_text(out / EXPOSURE_FILE, table)
        io.write_text(out / "audit.md", markdown)
    if opts.model_card is not None:
        from bnmem.auditing.model_card import card_section, write_card

        write_card(opts.model_card, card_section(result))
    if out is not None:
        io.write_json(out / "audit.json", result)  # last: a folder holding audit.json holds a finished audit
        files += ["audit.json", "audit.md", "gradient_norms.npy"] + ([EXPOSURE_FILE] if table is not None else [])
    logged = None
    if opts.mlflow and out is not None:  # last: a tracker that fails loses neither the files nor the gate's answer
        from bnmem.auditing.tracking import log_audit_or_warn

        logged = log_audit_or_warn(result, out, opts.model_dump(include={"top_k", "max_examples", "fail_at",
                                                                         "canaries", "one_run_beta"}))
    return AuditResult(data=result, markdown=markdown, out=out, files=files, mlflow=logged)


def exposure_table(result: dict[str, Any], ds: OutlierDataset, norms: np.ndarray) -> str | None:
    """exposure.csv's text from the copies' raw scores (None without shadow copies); its top rows go into
    ``result["membership"]["exposure"]`` for the headline and the reports."""
    from bnmem.auditing.exposure import csv_text, data_root, exposure_rows, exposure_section

    mem = result.get("membership")
    if not mem or RAW not in mem:
        return None
    raw = mem[RAW]
    cols, rows = exposure_rows(raw["scores"], raw["members"], raw["masks"], ds.info.get("files"), norms,
                               raw.get("extra"))
    mem["exposure"] = exposure_section(cols, rows, data_root(result))
    return csv_text(cols, rows)


CONFIG_FILE = "audit_config.json"


def audit_file(model_path: str | Path, config: AuditConfig, *, out: str | Path,
               shadow: ShadowCopies | dict | None = None, options: Any = None,
               notices: list[dict[str, str]] | None = None, **fields: Any) -> AuditResult:
    """``bnmem audit``: load a model file and its data, check they fit, then audit into ``out``.

    Args:
        model_path: a pickled nn.Module or a TorchScript file (trusted files only).
        config: ``data``: the data (and injected outliers) the model was trained
            on, as bnmem builds it, or ``folder``: an ImageFolder tree;
            ``train``: the shadow copies' recipe and the device.
        out: output folder (a rerun with other settings reuses the copies it holds; another model or other data
            is refused).
        shadow, options, fields: as :func:`bnmem.audit` (``--gs-reg`` is ``config.train.gs_reg``;
            ``config.outliers`` becomes ``rare_mask``).
        notices: the command's own warnings, printed with the audit's before any copy trains.

    Raises:
        BnmemError: any problem with the file, the data, or their fit, before anything is written.
    """
    from bnmem.auditing.options import resolve
    from bnmem.auditing.train_fn import add_import_paths

    copies, _, opts, _ = resolve(shadow, None, options, fields)
    check_outputs_wanted(opts, copies, out)
    # The model's class and a --train-fn module are found beside the model file or in the working directory.
    add_import_paths(Path(model_path).parent, Path.cwd())
    user_training(opts, copies)  # a bad --train-fn fails before the data are read
    model, fmt, ds, digest = load_checked(model_path, config, copies, opts.max_memory, opts.defenses)
    rare = rare_file_mask(config)
    held = non_member_files(config, ds)
    check_held_out(held, ds, opts.fail_at)  # before the folder is prepared
    resolved = {"model": str(model_path), "model_sha256": digest,
                **config.model_dump(mode="json", exclude={"folder", "outliers", "non_members"} if config.folder is None
                                    else {"data", "non_members"}),
                "top_k": opts.top_k, "max_examples": opts.max_examples, "shadow_models": copies.shadow_models,
                **({} if copies.match_steps else {"match_steps": False}),
                **({"compare_gs_reg": copies.compare_gs_reg} if copies.compare_gs_reg is not None else {}),
                **({"match_accuracy": True, "max_epochs": copies.max_epochs} if copies.match_accuracy else {}),
                **({"canaries": opts.canaries, "one_run_beta": opts.one_run_beta} if opts.canaries else {}),
                **({"train_fn": opts.train_fn} if isinstance(opts.train_fn, str) else {})}
    # not --non-members: the copies do not depend on it, so adding a held-out set reuses them (audit.json names it)
    out = prepare_audit_dir(out, resolved)
    opts = opts.model_copy(update={"seed": (config.folder or config.data).seed,
                                   "source": {"file": str(model_path), "file_format": fmt, "sha256": digest}})
    return run_audit(model, ds, None, copies, config.train, opts, out, {"rare_mask": rare, "non_members": held},
                     notices)


def non_member_files(config: AuditConfig, ds: OutlierDataset) -> Any:
    """``--non-members``: the held-out images, read as the training folder was (None when not given).

    Raises:
        BnmemError: ``--non-members`` without an image folder, or a bad folder or list (one line).
    """
    if config.non_members is None:
        return None
    if config.folder is None:
        raise BnmemError("--non-members names held-out images of an image folder: give --data-folder too")
    from bnmem.auditing.target import read_held_out

    return read_held_out(config.non_members, config.folder, ds)


def rare_file_mask(config: AuditConfig) -> np.ndarray | None:
    """The training mask of ``config.outliers`` (a CSV of file names, matched as ``--mislabeled`` is).

    Raises:
        BnmemError: ``outliers`` without an image folder, a missing CSV or names that match no image.
    """
    if config.outliers is None:
        return None
    if config.folder is None:
        raise BnmemError("--outliers names files of an image folder: give --data-folder too")
    from bnmem.data.image_folder import read_mislabeled, scan

    _, train, test = scan(config.folder)
    try:
        mask, _ = read_mislabeled(Path(config.outliers), config.folder.path, train, test)
    except BnmemError as e:
        raise BnmemError(str(e).replace("--mislabeled", "--outliers")) from None
    return mask


def load_checked(model_path: str | Path, config: AuditConfig, copies: ShadowCopies, max_memory: int | str | None,
                 defenses: str | Path | None) -> tuple[nn.Module, str, OutlierDataset, str]:
    """The model (on the recipe's device) and the data, every option checked; nothing written.

    Returns:
        ``(model, file format, data, sha256 of the file)``.
    """
    from bnmem.auditing.load import load_model_file
    from bnmem.train.device import check_device_here
    from bnmem.data.loaded import load_once

    check_device_here(config.train.device)  # before the file is read: torch's own error is a traceback
    model, fmt = load_model_file(model_path)
    if copies.wanted:
        check_shadow_request(model, copies)
    if max_memory is not None:
        parse_size(max_memory)
    if defenses is not None:
        from bnmem.auditing.report import frontier_citation

        frontier_citation(defenses)
    if config.folder is not None:
        from bnmem.data.image_folder import scan

        scan(config.folder)  # a mistyped or empty folder first: the channel advice below would not help
        check_channels(model, config.folder)  # before reading the images (their --mean/--std need it too)
        rare_file_mask(config)  # a bad --outliers CSV fails before the images are read
    ds = read_folder(config.folder) if config.folder is not None else load_once(config.data)
    model = model.to(config.train.device).eval()
    check_inputs(model, ds.x_train[:2].to(model_device(model)), ds.num_classes, ds.name)
    return model, fmt, ds, io.file_sha256(model_path)


def read_folder(folder: ImageFolderConfig) -> OutlierDataset:
    """The image folder as a dataset; an unreadable image's error line says what to do with the file."""
    from bnmem.data.image_folder import load_image_folder

    try:
        return load_image_folder(folder)
    except BnmemError as e:
        if str(e).startswith("cannot read image"):
            raise BnmemError(f"{e}; replace that file with a readable copy or move it out of {folder.path}, "
                             "then rerun") from None
        raise


def check_channels(model: nn.Module, folder: ImageFolderConfig) -> None:
    """``--channels`` that the model's first convolution does not take: one line that names the fix.

    A ``--transform`` decides the channels itself; the forward check covers it.
    """
    from bnmem.auditing.load import first_layer_channels

    want, have = first_layer_channels(model), folder.channels
    if folder.transform is None and want in (1, 3) and want != have:
        raise BnmemError(f"the model's first layer expects {want} input channels but the images were read with "
                         f"{have} (--channels {have}); rerun with --channels {want}")


# What an audit folder holds of one run besides the copies (audit.json last written, first removed).
REPORT_FILES = ("audit.json", "audit.md", "audit.html", "audit_roc.png", EXPOSURE_FILE, "gradient_norms.npy")
# Settings that name the audit's subject (not how it is audited): another value is another audit.
SUBJECT_KEYS = ("model_sha256", "data", "folder")
# ... except these, which only say which files are known outliers (they do not change the data or the copies).
NOT_SUBJECT = ("mislabeled",)


def audit_subject(config: dict[str, Any]) -> dict[str, Any]:
    """The model and the data an audit config describes (what a rerun into its folder must share)."""
    subject = {k: config.get(k) for k in SUBJECT_KEYS}
    if isinstance(subject["folder"], dict):
        subject["folder"] = {k: v for k, v in subject["folder"].items() if k not in NOT_SUBJECT}
    return subject


def prepare_audit_dir(out: str | Path, resolved: dict[str, Any]) -> Path:
    """The audit folder with this run's config (``audit_config.json``) and environment written.

    A rerun with other settings (more shadow copies, canaries, another gate or recipe) is not refused: the
    copies are stored under keys of what determines them (:mod:`bnmem.shadow.copies`), so it reuses those it
    needs and trains the rest. The previous run's reports are removed first, so the folder holds no finished
    audit (``audit.json``) of the new settings until there is one. Another model or other data is another
    audit, refused so the earlier one is not overwritten by mistake; a config left by an audit that failed
    before finishing anything is replaced.

    Raises:
        BnmemError: the folder holds an audit of another model or other data.
    """
    from bnmem.rundir import environment

    out = Path(out)
    path = out / CONFIG_FILE
    canonical = json.loads(json.dumps(resolved, default=str))
    previous = None
    if path.exists():
        try:
            previous = io.read_json(path)
        except (OSError, ValueError):
            previous = None
    shadow = out / "shadow"
    holds_work = (out / "audit.json").exists() or (shadow.is_dir() and any(shadow.rglob(io.DONE)))
    if isinstance(previous, dict) and previous != canonical and holds_work:
        if audit_subject(previous) != audit_subject(canonical):
            raise BnmemError(f"{out} holds an audit of another model or other data ({CONFIG_FILE}); use a new --out "
                             "directory or delete the old one")
        for name in REPORT_FILES:  # audit.json first: what marks a finished audit goes before anything else
            (out / name).unlink(missing_ok=True)
    out = io.ensure_dir(out)
    io.write_json(path, canonical)
    io.write_json(out / ENVIRONMENT_FILE, environment())
    return out
