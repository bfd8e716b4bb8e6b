# %% [markdown]
# # bnmem tutorial: Batch Normalization, memorization and membership inference
#
# This notebook uses bnmem's Python API on scikit-learn's embedded 8x8 digits (no download), at sizes that
# run in a few minutes on one CPU core. Each step ends with **Your question**: what to change to study your
# own. The sizes here are for speed, not for conclusions: a handful of seeds and shadow models gives wide
# intervals, and the numbers printed below say nothing about the paper's claims.
#
# `docs/tutorial.py` is the source of this notebook (`python tools/tutorial_notebook.py` rebuilds
# `docs/tutorial.ipynb` from it); `tests/test_tutorial.py` executes it.

# %%
import time
from pathlib import Path
import tempfile

import matplotlib.pyplot as plt
import numpy as np
import torch

import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm's notebook bars need ipywidgets
T0 = time.perf_counter()
torch.set_num_threads(1)
WORK = Path(tempfile.mkdtemp(prefix="bnmem-tutorial-"))  # every run directory of this notebook goes here
print("run directories under", WORK)


def show(fig, name):
    """Show a figure inline in Jupyter (bnmem's own figures switch matplotlib to a file backend, so
    ``plt.show()`` would not), or save it under WORK in a plain Python run."""
    try:
        get_ipython  # noqa: B018 - defined only inside IPython/Jupyter
        from IPython.display import display

        display(fig)
    except NameError:
        fig.savefig(WORK / f"{name}.png")
    plt.close(fig)

# %% [markdown]
# ## 1. A corrupted dataset
#
# `DataConfig` names the data and the outliers injected into its training split: `label_noise` flips a
# fraction of the labels to another class, `ood` adds out-of-distribution images with random labels. The same
# `seed` gives the same corruption for every model, so BN and no-norm models see identical data.

# %%
from bnmem.config import DataConfig
from bnmem.data import load_dataset

data = DataConfig(dataset="digits", label_noise=0.1, train_size=300, seed=0)
ds = load_dataset(data)
print(f"{ds.n_train} training images {tuple(ds.input_shape)}, {ds.num_classes} classes; "
      f"{int(ds.is_noisy.sum())} flipped labels, {int(ds.is_ood.sum())} OOD images; {len(ds.y_test)} test images")

fig, axes = plt.subplots(1, 6, figsize=(7, 1.5))
for ax, i in zip(axes, np.flatnonzero(ds.is_noisy)[:6]):
    ax.imshow(ds.x_train[i, 0], cmap="gray")
    ax.set_title(f"{int(ds.y_train_orig[i])} → {int(ds.y_train[i])}", fontsize=9)
    ax.axis("off")
fig.suptitle("flipped labels (true → trained on)", fontsize=10)
show(fig, "flipped_labels")

# %% [markdown]
# **Your question.** `dataset="mnist"` / `"cifar10"` (read from `data_root`, `download=True` fetches them);
# `label_noise=0.01` for rarer outliers; `ood=0.05, ood_source="noise"` (or `"heldout-classes"`, or another
# dataset of the same shape) for out-of-distribution ones; `train_size=None` for the whole split. Your own
# images: `bnmem.data.image_folder.load_image_folder`.

# %% [markdown]
# ## 2. BN and no-norm models, and their memorization curves
#
# The memorize lens trains every (norm, seed) on the same data, from paired initial weights, with the same
# batch order and recipe, and records per-epoch accuracy on the clean examples, on the flipped ones (against
# the flipped label: how far the model memorized them) and on the test set.

# %%
from bnmem.config import ModelConfig, TrainConfig
from bnmem.lenses.memorize import MemorizeConfig, run_memorize

recipe = TrainConfig(epochs=12, lr=0.05, batch_size=32, threads=1)
mem_cfg = MemorizeConfig(data=data, arch="lenet", norms=["batch", "none"], seeds=[0, 1], train=recipe)
mem = run_memorize(mem_cfg, WORK / "memorize", progress=False)

fig, ax = plt.subplots(figsize=(5, 3))
for norm, style in (("batch", "-"), ("none", "--")):
    curves = mem[norm]["mean"]
    epochs = np.arange(1, len(curves["noisy_acc"]) + 1)
    ax.plot(epochs, curves["noisy_acc"], style, color="tab:red", label=f"{norm}: flipped labels")
    ax.plot(epochs, curves["clean_acc"], style, color="tab:blue", label=f"{norm}: clean")
ax.set_xlabel("epoch")
ax.set_ylabel("training accuracy")
ax.legend(fontsize=8)
show(fig, "memorization_curves")
for norm in ("batch", "none"):
    print(f"{norm:>5}: final accuracy on flipped labels {mem[norm]['final']['noisy_acc']:.2f}, "
          f"test {mem[norm]['final']['test_acc']:.2f}")

# %% [markdown]
# **Your question.** `norms=["batch", "group", "layer", "none"]` compares every normalization;
# `arch="resnet20"` (or `mlp`, `densenet`, `resnet18`) another architecture; more `seeds` narrow the curves;
# `TrainConfig(optimizer="adam", weight_decay=0, augment="shift", gs_reg=0.1)` another recipe (`gs_reg`: the
# γ/σ regularizer). The same through the command line: `bnmem memorize --help`.

# %% [markdown]
# ## 3. Membership inference: LiRA with a handful of shadow models
#
# The lira lens trains `shadow_models` models per norm, each on a random half of the training set (every
# example IN for exactly half of them, the same keep matrix for every norm), queries them all, and runs every
# attack leave-one-out: each model is the target once, the others its reference models. Eight shadow models
# are far fewer than a study uses (64 and more): the intervals are wide.

# %%
from bnmem.lenses.lira import LiraConfig, run_lira

lira_cfg = LiraConfig(data=data, arch="lenet", norms=["batch", "none"], seeds=[0], shadow_models=8,
                      train=TrainConfig(epochs=8, lr=0.05, batch_size=32, threads=1))
lira = run_lira(lira_cfg, WORK / "lira", progress=False)
for norm in ("batch", "none"):
    online = lira[norm]["online"]  # mean over targets; ["auc_per_target"] has each target's
    print(f"{norm:>5}: online LiRA AUC, all examples {online['all']['auc']:.3f}, "
          f"flipped-label examples {online['outliers']['auc']:.3f}")

# %% [markdown]
# The lens keeps the attack statistic φ of every model on every example (`<norm>/phi.npy`) and the keep
# matrix, so any attack can be rerun from them with `bnmem.attacks`, here for the ROC curves:

# %%
from bnmem.attacks import AttackInputs, evaluate_inputs

fig, ax = plt.subplots(figsize=(4, 4))
for norm, color in (("batch", "tab:red"), ("none", "tab:blue")):
    norm_dir = WORK / "lira" / norm
    keep, noisy = np.load(norm_dir / "keep.npy"), np.load(norm_dir / "is_noisy.npy")
    inputs = AttackInputs.from_phi(np.load(norm_dir / "phi.npy"), keep)
    ev = evaluate_inputs(inputs, subsets={"outliers": noisy}, attacks=["online"])
    for subset, mask, style in (("all", np.ones_like(noisy), "-"), ("outliers", noisy, "--")):
        fpr, tpr = map(np.asarray, ev["curves"]["online"][subset]["pooled"])
        shown = fpr >= 1 / (~keep[:, mask]).sum()  # no FPR below 1 / (pooled non-member scores)
        ax.loglog(fpr[shown], np.maximum(tpr[shown], 1e-3), style, color=color, label=f"{norm}, {subset}")
ax.plot([1e-3, 1], [1e-3, 1], ":", color="gray")
ax.set_xlabel("false positive rate")
ax.set_ylabel("true positive rate")
ax.set_title("online LiRA, pooled over targets", fontsize=10)
ax.legend(fontsize=8)
show(fig, "roc")

# %% [markdown]
# **Your question.** `shadow_models=64` for usable low-FPR rates; `query_bn_mode="batch"` queries BN with
# batch statistics (as the reference LiRA code does); `views=["identity", "shift"]` adds augmented queries.
# `lira[norm]["attacks"]` holds every attack (offline LiRA, RMIA, loss, global threshold) per subset;
# `lira["paired"]` the BN − no-norm differences per target. `bnmem.attacks` runs the same attacks on φ
# arrays of your own shadow models (docs/attacks.md).

# %% [markdown]
# ## 4. Per-example memorization scores and the most memorized images
#
# From the same shadow models, each example's memorization score is its mean confidence when IN minus when
# OUT (Feldman's definition, estimated over the models that did and did not train on it), with an interval.
# The lens wrote them for each norm (`mem_scores.npz`).

# %%
from bnmem.shadow.memscores import load_mem_scores

scores = load_mem_scores(WORK / "lira" / "batch")
m = scores["mem_conf"]
order = np.argsort(-np.nan_to_num(m, nan=-np.inf))
print(f"BN: mean memorization score, flipped labels {np.nanmean(m[scores['is_noisy']]):.3f}, "
      f"clean {np.nanmean(m[~scores['is_noisy']]):.3f}")
fig, axes = plt.subplots(1, 8, figsize=(9, 1.7))
for ax, i in zip(axes, order[:8]):
    ax.imshow(ds.x_train[i, 0], cmap="gray")
    flag = "flipped" if scores["is_noisy"][i] else "clean"
    ax.set_title(f"{m[i]:.2f}\n{flag}", fontsize=8)
    ax.axis("off")
fig.suptitle("the most memorized training images (BN)", fontsize=10)
show(fig, "most_memorized")

# %% [markdown]
# **Your question.** `scores["mem_conf_low"]` / `["mem_conf_high"]` are each score's interval: with 8 models
# (4 IN, 4 OUT per example) they are wide; compare `WORK / "lira" / "none"` for the no-norm models, or rank by
# `scores["mem_top1"]` (0/1 correctness instead of confidence) where the lens stored predictions.

# %% [markdown]
# ## 5. A study's results in pandas, and one claim's number recomputed
#
# A study runs lenses over a grid of cells (datasets × architectures × outlier settings × replicates) into
# one run directory; `bnmem report` decides the paper's claims from it (`summary.csv`), and
# `bnmem.results.load` returns every per-seed and per-target number as one tidy table. Here: a tiny study, two
# replicates of one setting with LiRA on 4 shadow models per norm, under both recipes (fair arms: each norm's
# learning rate selected on a validation split, the default; and the paper's protocol), then claim 3a's effect
# on fair arms (BN − no-norm online
# LiRA AUC on all examples, paired by target model, averaged per replicate, then over replicates) recomputed
# from the table and compared with the report's `summary.csv`.

# %%
import bnmem.results
from bnmem.report.build import build_report
from bnmem.study import load_study, run_study
import yaml

study_file = WORK / "tiny.yaml"
study_file.write_text(yaml.safe_dump({
    "name": "tiny", "data": {"dataset": "digits", "train_size": 200, "seed": 0},
    "train": {"epochs": 4, "batch_size": 32, "threads": 1},
    "grid": {"norms": ["batch", "none"], "seeds": [0, 1], "replicates": 2, "outliers": [{"label_noise": 0.1}]},
    "lenses": {"lira": {"shadow_models": 4}}}))
run_study(load_study(study_file), WORK / "study", progress=False, graph=False)
build_report(WORK / "study")

df = bnmem.results.load(WORK / "study", progress=False)
print(df.shape)
df.head()

# %%
import csv

# the verdict is decided on fair arms (recipe per-norm, the default); the paper's protocol (shared) is a variant
auc = df[(df.lens == "lira") & (df.method == "online") & (df.subset == "all") & (df.metric == "auc")
         & (df.recipe == "per-norm")]
paired = auc.pivot_table(index=["replicate", "unit_id"], columns="norm", values="value")  # one row per target
per_replicate = (paired["batch"] - paired["none"]).groupby("replicate").mean()
with open(WORK / "study" / "summary.csv", encoding="utf-8", newline="") as f:
    claim = next(r for r in csv.DictReader(f) if r["id"] == "3a" and r["role"] == "verdict")
print("BN − none AUC per replicate:", {int(k): round(v, 5) for k, v in per_replicate.items()})
print(f"recomputed: {per_replicate.mean():+.5f}; summary.csv: {float(claim['value']):+.5f} "
      f"[{float(claim['ci_low']):+.5f}, {float(claim['ci_high']):+.5f}], {claim['verdict']}")
# summary.csv keeps 6 significant digits
assert abs(per_replicate.mean() - float(claim["value"])) <= 1e-5 * abs(float(claim["value"])) + 1e-12

# %% [markdown]
# Claims 1 and 2 compare the norms at matched clean-training progress (plan 5.0; `bnmem plan` states every
# rule), which takes an interpolation along each model's curve rather than a group-by; the table holds the
# per-epoch curves it needs (`lens == "memorize"`, one row per seed, subset and epoch).
#
# **Your question.** `studies/demo.yaml` is the whole study (every lens, three outlier settings, three
# replicates); `bnmem design STUDY.yaml` says how many replicates each claim needs; `bnmem compare RUN_A RUN_B`
# puts two runs' checklists side by side. docs/results.md documents every column of the table.

# %% [markdown]
# ## 6. Auditing a model
#
# `bnmem.audit` measures a trained model on its own training data: its normalization layers and |γ|/σ, where
# the largest per-example gradient norms sit (are the known outliers among them?), and, with
# `shadow_models`, the membership risk of its training recipe, per group, with intervals. Here: one of the
# BN models trained above, with the flipped labels as the known mislabeled examples.

# %%
import bnmem
from bnmem.train import seeded_model, train_model

model = seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0)
train_model(model, ds, recipe, seed=0, progress=False)
result = bnmem.audit(model.eval(), (ds.x_train, ds.y_train), (ds.x_test, ds.y_test), noisy_mask=ds.is_noisy,
                     shadow_models=4, train=recipe.model_dump(),  # the recipe the model trained with
                     out=WORK / "audit")
risk = result.data["risk"]
print("level:", risk["level"])
print(risk["headline"])

# %% [markdown]
# **Your question.** Your own model and data: `bnmem.audit(model, (x_train, y_train), (x_test, y_test),
# noisy_mask=...)` with the recipe you trained with in `train={...}` (its defaults are not PyTorch's:
# momentum 0.9, weight decay 5e-4), `shadow_models=16` or more for narrower intervals, `compare_gs_reg=0.1`
# to measure what the γ/σ regularizer changes; `result.markdown` is the whole audit, `bnmem report
# WORK/"audit"` its HTML page. From the command line: `bnmem audit --help`.

# %%
print(f"tutorial ran in {time.perf_counter() - T0:.0f} s")
