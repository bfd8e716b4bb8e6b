"""Auditing a user's own model (``bnmem audit`` / ``bnmem.audit``).

Modules:

* :mod:`~bnmem.auditing.run`: :func:`~bnmem.auditing.run.audit` and
  :func:`~bnmem.auditing.run.audit_file`, the entry points, and the result type;
* :mod:`~bnmem.auditing.load`: reading a model file and checking it accepts the data;
* :mod:`~bnmem.auditing.data`: ``(x, y)`` tensors and known-corrupted masks as a dataset;
* :mod:`~bnmem.auditing.sections`: the measured sections (norm layers, γ/σ, gradient norms, accuracy);
* :mod:`~bnmem.auditing.membership`: LiRA over shadow copies of the architecture;
* :mod:`~bnmem.auditing.leakage`: pooled attack metrics per group (whole set, outliers, most exposed)
  with bootstrap intervals and cautions;
* :mod:`~bnmem.auditing.calibration`: shadow accuracy beside the model's, ``--match-accuracy``;
* :mod:`~bnmem.auditing.compare`: ``--compare-gs-reg``, the copies with and without the γ/σ regularizer;
* :mod:`~bnmem.auditing.findings`: the BN and accuracy signals that explain the leakage;
* :mod:`~bnmem.auditing.report`: the risk level, headline paragraph and recommendations;
* :mod:`~bnmem.auditing.markdown` / :mod:`~bnmem.auditing.html`: ``audit.md`` and ``audit.html``.
"""
