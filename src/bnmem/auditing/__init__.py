"""Auditing a user's own model (``bnmem audit`` / ``bnmem.audit``).

Modules:

* :mod:`~bnmem.auditing.run`: :func:`~bnmem.auditing.run.run_audit` (``bnmem.audit``'s body) and
  :func:`~bnmem.auditing.run.audit_file`, the entry points, and the result type;
* :mod:`~bnmem.auditing.load`: reading a model file and checking it accepts the data;
* :mod:`~bnmem.auditing.data`: ``(x, y)`` tensors and known-corrupted masks as a dataset;
* :mod:`~bnmem.auditing.sections`: the measured sections (norm layers, γ/σ, gradient norms, accuracy);
* :mod:`~bnmem.auditing.membership`: LiRA over shadow copies of the architecture;
* :mod:`~bnmem.auditing.leakage`: pooled attack metrics per group (whole set, outliers, rare, largest gradient norms)
  with intervals (bootstrap for the AUC, Clopper–Pearson for the TPR where estimable) and cautions;
* :mod:`~bnmem.auditing.calibration`: the copies' length (the model's optimizer steps), their accuracy
  beside the model's ("not assessed" outside the margin), ``--match-accuracy``, the model's own flags;
* :mod:`~bnmem.auditing.level`: the level from both ends of each group's AUC interval;
* :mod:`~bnmem.auditing.compare`: ``--compare-gs-reg``, paired copies with and without the γ/σ regularizer;
* :mod:`~bnmem.auditing.findings`: the BN and accuracy signals that explain the leakage;
* :mod:`~bnmem.auditing.report`: the headline paragraph, ε in its place, the risk summary;
* :mod:`~bnmem.auditing.advice`: recommendations conditioned on the findings;
* :mod:`~bnmem.auditing.markdown` / :mod:`~bnmem.auditing.html`: ``audit.md`` and ``audit.html``;
* :mod:`~bnmem.auditing.api`: ``bnmem.audit``'s signature (torch-free); :mod:`~bnmem.auditing.options`: the
  options objects its keywords and ``bnmem audit``'s flags are generated from;
* :mod:`~bnmem.auditing.gate`: ``--fail-at``, the CI gate and its exit codes;
* :mod:`~bnmem.auditing.exposure`: ``exposure.csv``, every training file ranked by exposure;
* :mod:`~bnmem.auditing.target`: the shipped model attacked on its members against a held-out set
  (``--non-members``); :mod:`~bnmem.auditing.slices`: the attacks per class and by correct/incorrect prediction;
* :mod:`~bnmem.auditing.one_run`: ``--canaries``, the one-run audit of the recipe;
* :mod:`~bnmem.auditing.model_card`: ``--model-card``; :mod:`~bnmem.auditing.tracking`: ``--mlflow``.
"""
