"""The shadow-model engine: train M models of one recipe on keep-matrix halves, query them to φ, attack.

This layer sits below the lenses and above ``train``, ``measure`` and
``attacks``. Every lens that needs shadow models (lira, defenses, mitigate) and
the practitioner audit (``bnmem audit --shadow-models``) go through it; none of
them trains or queries shadow models on its own.

What a caller says, and where it lands::

    cfg = ShadowConfig(data=DataConfig(dataset="digits", label_noise=0.05), arch="lenet",
                       norms=["batch"], train=TrainConfig(epochs=30), shadow_models=16,
                       views=["identity"], query_bn_mode="eval", keep_seed=0)
    train_shadow_models(cfg, "batch", norm_dir, executor)      # M models, chunked, resumable
    info = query_models(cfg, "batch", norm_dir, executor)      # φ of every model on every example
    arrays = load_attack_inputs(norm_dir)                      # keep, labels, masks, φ readers
    entry = run_shadow_norm(cfg, "batch", norm_dir)            # all three, then every attack

- **recipe**: ``cfg.arch`` with ``norm``, trained with ``cfg.train`` (the
  ensemble engine, :func:`bnmem.train.ensemble.train_models`); DP-SGD shadow
  models: :func:`~bnmem.shadow.dp.train_dp_shadow_models` (same layout), and a
  user's own architecture: :mod:`bnmem.shadow.copies` (the audit);
- **M models, keep matrix**: ``cfg.shadow_models``; model m trains on
  ``np.flatnonzero(shadow_keep(cfg, n_train)[m])`` with seed ``cfg.model_seed(m)``;
- **views, BN mode**: ``cfg.views`` / ``cfg.query_bn_mode``
  (:func:`~bnmem.shadow.query.query_logits` is the one query function);
- **output**: ``<norm_dir>/phi.npy`` [M, n_train, n_views] (+ ``phi_lo.npy``),
  the same on the test split (RMIA's population), ``keep.npy``, ``labels.npy``,
  the outlier masks and ``query.json`` (settings and per-model accuracies).

One model's query is :func:`~bnmem.shadow.query.query_model`, returning a
:class:`~bnmem.shadow.query.ModelQuery` (float32 logits per view, float64 φ,
identity-view predictions, accuracies); both paths use it, so a new per-model
output (e.g. per-view predicted classes, ``logits.argmax(-1)``) is added there
once and stored by :func:`~bnmem.shadow.query.query_shadow_chunk` /
:func:`~bnmem.shadow.query.assemble` (a new stored file changes
``query.json``'s ``stored`` list, so older queries are redone).

Shadow copies of a given ``nn.Module`` (the audit)::

    keep = paired_keep_matrix(M, ds.n_train, keep_seed)   # the first M rows of any larger M's
    copies = query_copies(model, ds, keep, train_cfg, out_dir, executor=None)   # or a CopyTraining
    copies.phi, copies.population_phi, copies.accuracy, copies.views

Modules: :mod:`~bnmem.shadow.config` (``ShadowConfig``: the protocol of
:class:`bnmem.config.ShadowProtocol`, where its fields and rules are declared once), :mod:`~bnmem.shadow.training`
(layout, keep matrix, chunk jobs, loading), :mod:`~bnmem.shadow.dp` (DP-SGD chunks),
:mod:`~bnmem.shadow.query` (views, BN mode, φ), :mod:`~bnmem.shadow.evaluate`
(attacks over a queried directory), :mod:`~bnmem.shadow.recipe` (per-norm recipe),
:mod:`~bnmem.shadow.work` (a cell's work built once, as a study's graph tasks).
"""

from bnmem.shadow.config import ShadowConfig
from bnmem.shadow.copies import CopyQueries, fresh_copy, query_copies
from bnmem.shadow.evaluate import accuracy_summary, attack_norm, query_and_attack, run_shadow_norm
from bnmem.shadow.query import ModelQuery, QueryOptions, load_attack_inputs, query_logits, query_model, query_models
from bnmem.shadow.training import load_shadow_models, shadow_keep, train_shadow_models

__all__ = ["CopyQueries", "ModelQuery", "QueryOptions", "ShadowConfig", "accuracy_summary", "attack_norm",
           "fresh_copy", "load_attack_inputs", "load_shadow_models", "query_and_attack", "query_copies",
           "query_logits", "query_model", "query_models", "run_shadow_norm", "shadow_keep", "train_shadow_models"]
