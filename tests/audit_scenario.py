"""The practitioner's scenario of issues 22 and 27, at test size: a PNG folder, some files mislabeled, a small CNN
with three BatchNorm2d layers trained in plain PyTorch through torchvision's ImageFolder (RGB), saved with
torch.save.

The sizes are issue 27's: 600 images (480 training, 120 test), 30 training files put in a wrong class folder,
10 epochs of plain SGD (lr 0.005, no momentum, weight decay 5e-4, batch 64), which leaves the model at about
80% training accuracy, as the issue's model was.

``write_scenario(root)`` writes ``root/pictures/{train,test}/<digit>/*.png``, ``root/mislabeled.csv`` and
``root/model.pt`` and returns their paths with the command-line flags that describe the data and the recipe.
Run as a script (``python tests/audit_scenario.py DIR``) it also audits the model and prints the headline.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

N_TRAIN, N_TEST, N_MISLABELED, SIZE = 480, 120, 30, 16
EPOCHS, LR, BATCH, MOMENTUM = 10, 0.005, 64, 0.0
# What the user's loop does (torchvision ImageFolder, ToTensor, Normalize(0.5, 0.5)), as audit flags.
DATA_FLAGS = ["--mean", "0.5,0.5,0.5", "--std", "0.5,0.5,0.5"]
RECIPE_FLAGS = ["--epochs", str(EPOCHS), "--lr", str(LR), "--batch-size", str(BATCH), "--momentum", str(MOMENTUM),
                "--weight-decay", "5e-4"]


def small_cnn() -> nn.Module:
    """Three conv blocks with BatchNorm2d, a linear head: about 7k parameters."""
    def block(c_in: int, c_out: int, pool: bool) -> list[nn.Module]:
        return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()] + (
            [nn.MaxPool2d(2)] if pool else [])

    return nn.Sequential(*block(3, 8, True), *block(8, 16, True), *block(16, 16, False), nn.Flatten(),
                         nn.Linear(16 * (SIZE // 4) ** 2, 10))


def write_pictures(root: Path, seed: int = 0, n_mislabeled: int = N_MISLABELED,
                   rare: int | None = None) -> tuple[Path, Path]:
    """Digits upscaled to SIZE×SIZE grayscale PNGs; ``n_mislabeled`` training files put in a wrong class folder.

    ``rare``: keep only this many training images of class 9 (correctly labelled), listed in ``outliers.csv``
    (returned instead of ``mislabeled.csv``).
    """
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(digits.target))[: N_TRAIN + N_TEST]
    wrong = set(order[rng.choice(N_TRAIN, n_mislabeled, replace=False)].tolist())
    if rare is not None:
        nines = [i for i in order[:N_TRAIN] if digits.target[i] == 9]
        order = np.array([i for i in order if i not in set(nines[rare:])])
    pictures, bad = root / "pictures", []
    for rank, i in enumerate(order):
        split = "train" if rank < N_TRAIN - (0 if rare is None else len(nines) - rare) else "test"
        label = int(digits.target[i])
        if i in wrong:
            label = int((label + rng.integers(1, 10)) % 10)
        folder = pictures / split / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        img = Image.fromarray((digits.images[i] * (255 / 16)).astype(np.uint8), mode="L")
        img.resize((SIZE, SIZE), Image.Resampling.BILINEAR).save(folder / f"{i:04d}.png")
        if i in wrong or (rare is not None and split == "train" and label == 9):
            bad.append(f"train/{label}/{i:04d}.png")
    listing = root / ("mislabeled.csv" if rare is None else "outliers.csv")
    with open(listing, "w", newline="") as f:
        csv.writer(f).writerows([["file"], *[[b] for b in sorted(bad)]])
    return pictures, listing


# The rare-class case (issue 27, item 4): class 9 keeps N_RARE correctly labelled training images, nothing is
# mislabeled, and the user's loop trains long enough to fit them.
N_RARE = 6
RARE_RECIPE = {"epochs": 20, "lr": 0.05, "momentum": 0.9}


def write_rare_scenario(root: Path, seed: int = 0) -> dict:
    """A folder whose class 9 has N_RARE training images, listed in outliers.csv; the model and audit flags."""
    root = Path(root)
    pictures, listing = write_pictures(root, seed, n_mislabeled=0, rare=N_RARE)
    model = train_user_model(pictures, seed, **RARE_RECIPE)
    torch.save(model, root / "model.pt")
    flags = ["--epochs", str(RARE_RECIPE["epochs"]), "--lr", str(RARE_RECIPE["lr"]), "--batch-size", str(BATCH),
             "--momentum", str(RARE_RECIPE["momentum"]), "--weight-decay", "5e-4"]
    return {"pictures": pictures, "outliers": listing, "model": root / "model.pt",
            "flags": ["--model", str(root / "model.pt"), "--data-folder", str(pictures), "--outliers", str(listing),
                      *DATA_FLAGS, *flags]}


def train_user_model(pictures: Path, seed: int = 0, epochs: int = EPOCHS, lr: float = LR,
                     momentum: float = MOMENTUM) -> nn.Module:
    """The user's own loop: ImageFolder (RGB), ToTensor, Normalize(0.5, 0.5), plain SGD."""
    from torchvision import datasets, transforms

    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,) * 3, (0.5,) * 3)])
    data = datasets.ImageFolder(str(pictures / "train"), transform=tf)
    torch.manual_seed(seed)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True)
    model = small_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=5e-4)
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    return model.eval()


def write_scenario(root: Path, seed: int = 0) -> dict:
    """The folder, the CSV and the saved model; their paths and the flags an audit of them takes."""
    root = Path(root)
    pictures, mislabeled = write_pictures(root, seed)
    model = train_user_model(pictures, seed)
    torch.save(model, root / "model.pt")
    return {"pictures": pictures, "mislabeled": mislabeled, "model": root / "model.pt",
            "flags": ["--model", str(root / "model.pt"), "--data-folder", str(pictures),
                      "--mislabeled", str(mislabeled), *DATA_FLAGS, *RECIPE_FLAGS]}



def write_clean_scenario(root: Path, seed: int = 0) -> dict:
    """The same folder without its mislabeled files, and a model trained by the same loop on what is left: the
    model a team would ship after removing the files it knew were wrong. Its flags carry no --mislabeled."""
    import shutil

    root = Path(root)
    pictures, mislabeled = write_pictures(root / "with-mislabeled", seed)
    clean = root / "pictures"
    shutil.copytree(pictures, clean)
    with open(mislabeled, newline="") as f:
        for (name,) in list(csv.reader(f))[1:]:
            (clean / name).unlink()
    model = train_user_model(clean, seed)
    torch.save(model, root / "model.pt")
    return {"pictures": clean, "model": root / "model.pt", "removed": N_MISLABELED,
            "flags": ["--model", str(root / "model.pt"), "--data-folder", str(clean), *DATA_FLAGS, *RECIPE_FLAGS]}

if __name__ == "__main__":
    import json

    from bnmem.cli import main

    where = Path(sys.argv[1])
    s = write_scenario(where)
    code = main(["audit", "--quiet", *s["flags"], "--channels", "3", "--shadow-models", "4", *sys.argv[2:],
                 "--out", str(where / "audit")])
    res = json.loads((where / "audit" / "audit.json").read_text())
    print(json.dumps({"risk": res["risk"], "accuracy": res["accuracy"],
                      "membership": {k: res["membership"][k] for k in ("attacks", "shadow_accuracy")}}, indent=1))
