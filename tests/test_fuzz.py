"""Property-based fuzzer (issue 39): every command's flags, study files, audit inputs and damaged run directories.

The property, for every generated case (tests/fuzz_support.py, ``check_outcome``): ``bnmem`` succeeds (or a
stubbed engine is reached: the input passed every check), or it exits 2 with one ``bnmem: error:`` line and no
traceback; a failed command leaves nothing that looks finished (no DONE, report, summary.csv, audit.json, ...).
Each family also reruns a corrected command, which must then succeed. Cases run in this process through
:func:`bnmem.cli.main`; ``test_fuzz_subprocess_*`` (marked ``subprocess``) run a few as real processes.

Examples are derandomized (tests/conftest.py's profile); ``FUZZ_SCALE`` multiplies every family's
``max_examples`` (``FUZZ_SCALE=10 pytest tests/test_fuzz.py`` for a long hunt). docs/testing.md lists the counts
and what the fuzzer found.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_support import FINISHED, check_outcome, engine_stubs, error_line, files_under, in_directory, invoke
from bnmem.names import ARCH_ALIASES, ARCHS, DATASETS, NORMS

SCALE = float(os.environ.get("FUZZ_SCALE", "1"))


def examples(n: int) -> settings:
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None)


# ---------------------------------------------------------------------------------------------- fixtures

TINY_STUDY = {"name": "fz", "data": {"dataset": "digits", "train_size": 120}, "train": {"epochs": 1, "batch_size": 64},
              "norms": ["batch", "none"], "grid": {"seeds": [0], "replicates": 1}, "lenses": {"memorize": {}}}


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """Inputs shared by the families: a tiny valid study, a model that fits digits, an image folder with its
    fitting model, junk files."""
    import torch
    from PIL import Image
    from torch import nn

    from bnmem.data.sources import dataset_shape
    from bnmem.models import build_model

    root = tmp_path_factory.mktemp("fuzz-assets")
    study = root / "study.yaml"
    study.write_text(yaml.safe_dump(TINY_STUDY))
    shape, classes = dataset_shape("digits")
    torch.manual_seed(0)
    model = root / "model.pt"
    torch.save(build_model("lenet", shape, classes, "batch"), model)
    (root / "empty.bin").write_bytes(b"")
    (root / "junk.bin").write_bytes(b"\x00\xffnot a model\n" * 7)
    (root / "a_dir").mkdir()
    # An image folder: 3 classes x 6 RGB 8x8 PNGs in one folder (seeded split), and a CNN that fits it.
    pictures = root / "pictures"
    rng = torch.Generator().manual_seed(0)
    for c in range(3):
        (pictures / f"c{c}").mkdir(parents=True)
        for i in range(6):
            pixels = (torch.rand(8, 8, 3, generator=rng) * 255).to(torch.uint8).numpy()
            Image.fromarray(pixels, mode="RGB").save(pictures / f"c{c}" / f"img{i}.png")
    folder_model = root / "folder_model.pt"
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                             nn.Linear(4 * 8 * 8, 3)), folder_model)
    (root / "mislabeled.csv").write_text("file\nc0/img0.png\n")
    return {"root": root, "study": study, "model": model, "pictures": pictures, "folder_model": folder_model}


@pytest.fixture
def stubs():
    with engine_stubs() as mp:
        yield mp


def run_case(argv: list[str], cwd: Path | None = None, watch: Path | None = None):
    """Run ``argv`` in a fresh working directory (default outputs land there); check the property."""
    with tempfile.TemporaryDirectory(prefix="bnmem-fuzz-") as tmp:
        here = Path(tmp) if cwd is None else cwd
        watched = here if watch is None else watch
        with in_directory(here):
            before = files_under(watched)
            r = invoke(argv)
            after = files_under(watched)
        check_outcome(r, argv, before, after)
        return r


# ---------------------------------------------------------------------------------------------- 1. flags

def _commands() -> dict:
    """``name -> click command`` with every lens command built in full."""
    from typer.main import get_command

    from bnmem.cli import app
    from bnmem.cli.commands.lens import build_lens_command
    from bnmem.lenses import registry

    for name in registry.BUILTIN:
        build_lens_command(name)
    return get_command(app).commands


COMMANDS = _commands()
OPTIONS = {name: [p for p in cmd.params if getattr(p, "opts", None) and p.opts[0].startswith("--")
                  and p.name != "help"] for name, cmd in COMMANDS.items()}

JUNK = ["", " ", "x", "-1", "0", "1e999", "nan", "inf", "-inf", "1,2", "ünïcødé", "a=b", "--out", "None", "[]",
        "{}", "1" * 30, "0x10", "\t"]
POOLS = {
    "--dataset": [*DATASETS, "imagenet", "Digits"],
    "--arch": [*ARCHS, *ARCH_ALIASES, "vgg"],
    "--norms": [*NORMS, "batch,none", "batch,batch", "batch,", ",", "batch,weird", "group,layer,none"],
    "--optimizer": ["sgd", "adam", "rmsprop", "SGD"],
    "--schedule": ["constant", "cosine", "step", "linear"],
    "--device": ["cpu", "cuda", "cuda:7", "mps", "tpu", "cpu:0"],
    "--seeds": ["0,1", "0,0", "3", "0", "-1,2", "1,x", ",", "0,1,2,3,4,5,6,7"],
    "--executor": ["local", "ray", "slurm"],
    "--format": ["csv", "parquet", "json", "CSV"],
    "--views": ["identity", "augment", "flip", "identity,flip", "identity,identity", "bogus"],
    "--query-bn-mode": ["eval", "train", "both", "x"],
    "--risk-attack": ["online", "offline", "global", "x"],
    "--risk-metric": ["auc", "tpr@0.1%fpr", "tpr@1%fpr", "x"],
    "--dp-norms": ["group", "none", "batch", "group,none", "layer"],
    "--dp-accountant": ["prv", "rdp", "gdp", "x"],
    "--dp-epsilons": ["1.0,8.0", "8", "0", "-1", "inf", "1,1", "x"],
    "--outlier-kind": ["flip", "ood", "x"],
    "--definition": ["eval", "batch", "eval,batch", "train", "eval,eval"],
    "--method": ["auto", "ghost", "vmap", "loop", "x"],
    "--at": ["1,2,3", "0", "1,1", "3,1", "999", "-1", "x", "1,"],
    "--lambdas": ["0.1,1.0,10.0", "0", "-1", "1,1", "x", "1e9"],
    "--taus": ["1.0", "0", "-1", "x", "1,2"],
    "--mean": ["0.5,0.5,0.5", "0.5", "x", "0.5,0.5", "nan,0,0"],
    "--std": ["0.5,0.5,0.5", "0", "0,0,0", "-1,1,1", "x"],
    "--max-memory": ["8GB", "1KB", "1", "0", "-1GB", "10XB", "1.5GB", "1e40GB"],
    "--ood-source": ["noise", "heldout-classes", "mnist", "digits", "cifar10", "x"],
    "--ray-address": ["auto", "127.0.0.1:6379", "x"],
}
PATH_FLAGS = {"--out", "--data-root", "--pilot", "--propose", "--defenses", "--data-folder", "--mislabeled",
              "--outliers", "--transform", "--model"}


def path_pool(assets) -> list[str]:
    r = assets["root"]
    return ["new_folder", str(r / "empty.bin"), str(r / "junk.bin"), str(r / "a_dir"), str(r / "nowhere" / "x"),
            str(assets["study"]), str(assets["model"]), "", "/dev/null", "ünï/out", str(assets["pictures"])]


def value_strategy(option, assets) -> st.SearchStrategy[str]:
    """Values for one option: plausible ones for its name, its type's edges and junk."""
    flag = option.opts[0]
    default = option.default
    junk = st.sampled_from(JUNK)
    if flag in POOLS:
        return st.one_of(st.sampled_from(POOLS[flag]), junk)
    if flag in PATH_FLAGS:
        return st.one_of(st.sampled_from(path_pool(assets)), junk)
    if isinstance(default, bool):
        return junk
    if isinstance(default, int):
        return st.one_of(st.integers(-3, 12).map(str), st.sampled_from(["2147483648", "10000000000", "1.5", "1e3"]),
                         junk)
    if isinstance(default, float):
        return st.one_of(st.floats(-2, 2, allow_nan=False).map(repr), st.sampled_from(["1e300", "-0.0", "1"]), junk)
    return st.one_of(st.integers(-2, 100).map(str), st.floats(-1, 2).map(repr), junk)


# --set: real config paths (valid and not) and values of every type.
SET_PATHS = ["train.lr", "train.epochs", "train.batch_size", "train.optimizer", "train.nonsense", "data.dataset",
             "data.label_noise", "data.train_size", "data.val_fraction", "data.seed", "seeds", "norms", "arch",
             "train", "data", "", "train.", ".lr", "train..lr", "train.lr.x", "shadow_models", "views",
             "grid.replicates", "grid.archs", "lenses.memorize", "lenses.lira.shadow_models", "lenses.bogus",
             "grid.datasets", "name", "resources.num_cpus", "ünï.x"]
SET_VALUES = ["1", "0", "-1", "0.5", "x", "true", "null", "[]", "[1, 2]", "[batch]", "{a: 1}", "1e9", "",
              "[", "'quoted'", "lenet", "digits", "[digits, mnist]", "1e-300", "- x"]


def set_strategy() -> st.SearchStrategy[list[str]]:
    pair = st.one_of(st.tuples(st.sampled_from(SET_PATHS), st.sampled_from(SET_VALUES)).map(lambda kv: "=".join(kv)),
                     st.sampled_from(["novalue", "=", "==1", "train.lr==1"]))
    return st.lists(pair, max_size=2).map(lambda items: [x for item in items for x in ("--set", item)])


def base_argv(command: str, assets) -> list[str]:
    """What each command needs to get past its required arguments (a valid case by itself)."""
    if command in ("run", "design"):
        return [command, str(assets["study"])]
    if command in ("report", "export"):
        return [command, "no_such_run"]
    if command == "compare":
        return [command, "no_such_run", "no_such_run_either"]
    if command == "audit":
        return [command, "--model", str(assets["model"]), "--max-examples", "20", "--quiet"]
    return [command]


@st.composite
def flag_case(draw, assets):
    command = draw(st.sampled_from(sorted(COMMANDS)))
    options = OPTIONS[command]
    argv = base_argv(command, assets)
    picked = draw(st.lists(st.sampled_from(options), max_size=4, unique_by=lambda o: o.opts[0])) if options else []
    for option in picked:
        flag = option.opts[0]
        if flag == "--set":
            continue
        if command == "audit" and flag == "--download":
            continue  # would fetch a dataset from the network
        if getattr(option, "is_flag", False):
            argv.append(draw(st.sampled_from([flag, *option.secondary_opts])) if option.secondary_opts else flag)
            continue
        value = draw(value_strategy(option, assets))
        argv += [f"{flag}={value}"] if draw(st.booleans()) and value else [flag, value]
    if any(o.opts[0] == "--set" for o in options):
        argv += draw(set_strategy())
    extra = draw(st.sampled_from([[], [], [], [], ["--nonsense"], ["--help"], ["stray"], ["-x"], ["--out"]]))
    return argv + extra


@examples(400)
@given(data=st.data())
def test_fuzz_flags(stubs, assets, data):
    argv = data.draw(flag_case(assets))
    run_case(argv)


# Options that take a value, per command (--set, --out, --propose and --download have cases of their own).
VALUED = {c: [o for o in opts if not getattr(o, "is_flag", False)
              and o.opts[0] not in ("--set", "--download", "--out", "--propose")] for c, opts in OPTIONS.items()}
VALUED = {c: opts for c, opts in VALUED.items() if opts}


def single_option_case(assets):
    """One command with one generated option: (argv, the option, its default argv)."""

    @st.composite
    def case(draw):
        command = draw(st.sampled_from(sorted(c for c in VALUED if c not in ("report", "export", "compare"))))
        options = VALUED[command]
        option = draw(st.sampled_from(options))
        value = draw(value_strategy(option, assets))
        return command, option, value

    return case()


@examples(150)
@given(data=st.data())
def test_fuzz_one_bad_flag_names_it_and_the_corrected_rerun_passes(stubs, assets, data):
    """A single generated option: if it fails, the line names the flag (or its value), and the same command
    without it (the option's default: the corrected command) passes."""
    command, option, value = data.draw(single_option_case(assets))
    base = base_argv(command, assets)
    r = run_case([*base, option.opts[0], value])
    if r.reached or r.code == 0:
        return
    line = error_line(r.err)
    names = {option.opts[0], option.opts[0][2:], option.name, option.opts[0][2:].replace("-", "_")}
    assert any(n in line for n in names) or (value.strip() and value in line), \
        f"{command} {option.opts[0]} {value!r}: the error does not name the flag or the value: {line}"
    again = run_case(base)
    assert again.reached or again.code == 0, f"corrected rerun of {command} failed: {again.err}"


# ---------------------------------------------------------------------------------------------- 2. study files

LENS_NAMES = ["memorize", "gradnorms", "gamma-sigma", "gamma_sigma", "mitigate", "lira", "rmia", "theory", "defenses",
              "bogus", ""]
ANY_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2, 5), st.sampled_from([10**6, 2**40, -(10**9)]),
                       st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(JUNK))


def lens_options() -> st.SearchStrategy:
    option = st.sampled_from(["epochs", "replicates", "archs", "clean", "shadow_models", "at", "lambdas", "every",
                              "nonsense", "train", "seeds", "views", "steps"])
    value = st.one_of(ANY_SCALAR, st.lists(st.sampled_from([*ARCHS, "vgg", 1, -1, "1"]), max_size=3),
                      st.just({"lr": 0.1}), st.just({"bogus": 1}))
    return st.one_of(st.none(), st.booleans(), st.dictionaries(option, value, max_size=2), st.sampled_from([[], "x", 3]))


@st.composite
def study_doc(draw):
    """A study document: the tiny valid one with some keys replaced by generated values (or added, or removed)."""
    doc = yaml.safe_load(yaml.safe_dump(TINY_STUDY))
    edits = draw(st.integers(0, 4))
    for _ in range(edits):
        where = draw(st.sampled_from(["name", "data", "train", "grid", "lenses", "top", "remove", "arch", "norms",
                                      "seeds", "resources"]))
        if where == "name":
            doc["name"] = draw(st.one_of(st.sampled_from(["", "bad name!", "ünï", "a/b", "ok-name"]), ANY_SCALAR))
        elif where == "data":
            key = draw(st.sampled_from(["dataset", "label_noise", "ood", "ood_source", "train_size", "seed",
                                        "val_fraction", "datasett"]))
            doc.setdefault("data", {})[key] = draw(st.one_of(ANY_SCALAR, st.sampled_from([*DATASETS, "imagenet"])))
        elif where == "train":
            key = draw(st.sampled_from(["lr", "epochs", "batch_size", "optimizer", "momentum", "device", "threads",
                                        "augment", "epochz"]))
            doc.setdefault("train", {})[key] = draw(ANY_SCALAR)
        elif where == "grid":
            key = draw(st.sampled_from(["datasets", "archs", "norms", "outliers", "seeds", "replicates", "recipes",
                                        "gridz"]))
            pool = {"datasets": [*DATASETS, "imagenet"], "archs": [*ARCHS, "vgg"], "norms": [*NORMS, "weird"],
                    "outliers": [{"label_noise": 0.05}, {}, {"ood": 2}, {"label_noise": -1}, {"x": 1}, "x"],
                    "seeds": [0, 1, -1, "x", 2**40], "recipes": ["shared", "per-norm", "x"]}.get(key, [1, "x"])
            value = draw(st.one_of(st.lists(st.sampled_from(pool), max_size=3), ANY_SCALAR))
            doc.setdefault("grid", {})[key] = value
        elif where == "lenses":
            lenses = draw(st.one_of(
                st.dictionaries(st.sampled_from(LENS_NAMES), lens_options(), max_size=3),
                st.lists(st.sampled_from(LENS_NAMES), max_size=3), ANY_SCALAR))
            doc["lenses"] = lenses
        elif where == "top":
            doc[draw(st.sampled_from(["extra", "lense", "grid2", "1"]))] = draw(ANY_SCALAR)
        elif where == "remove":
            doc.pop(draw(st.sampled_from(sorted(doc) or ["name"])), None)
        elif where == "resources":
            doc["resources"] = draw(st.one_of(st.dictionaries(st.sampled_from(["num_cpus", "num_gpus", "x"]),
                                                              ANY_SCALAR, max_size=2), ANY_SCALAR))
        else:
            doc[where] = draw(st.one_of(ANY_SCALAR, st.lists(st.sampled_from([*ARCHS, *NORMS, 0, "x"]), max_size=3)))
    return doc


def absurd(doc: dict) -> bool:
    """A document whose plan would list more than a few thousand jobs (checked separately: it must fail fast)."""
    grid = doc.get("grid") if isinstance(doc.get("grid"), dict) else {}
    reps = grid.get("replicates")
    return isinstance(reps, int) and not isinstance(reps, bool) and reps > 1000


@st.composite
def study_text(draw):
    """The YAML text of a generated document, or a damaged text."""
    kind = draw(st.sampled_from(["doc"] * 8 + ["garbage", "empty", "list", "binary", "tabs"]))
    if kind == "doc":
        doc = draw(study_doc())
        return yaml.safe_dump(doc, allow_unicode=True)
    return {"garbage": "name: [unclosed\n", "empty": "", "list": "- a\n- b\n", "binary": "\udcff\x00",
            "tabs": "name: fz\n\tlenses: [memorize]\n"}[kind]


@examples(300)
@given(text=study_text(), command=st.sampled_from(["run"] * 6 + ["run-dry", "design"]))
def test_fuzz_study_files(stubs, assets, text, command):
    with tempfile.TemporaryDirectory(prefix="bnmem-fuzz-") as tmp:
        path = Path(tmp) / "study.yaml"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        argv = {"run": ["run", path, "--out", Path(tmp) / "out", "--quiet"], "run-dry": ["run", path, "--dry-run"],
                "design": ["design", path]}[command]
        run_case(argv, cwd=Path(tmp))


def test_fuzz_study_rerun_after_fix(stubs, assets, tmp_path):
    """A study with an unknown key fails in one line naming it; the corrected file passes."""
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({**TINY_STUDY, "grid": {"replicates": 1, "archz": ["lenet"]}}))
    r = run_case(["run", path, "--out", tmp_path / "out", "--quiet"], cwd=tmp_path)
    assert r.code == 2 and "archz" in error_line(r.err)
    path.write_text(yaml.safe_dump(TINY_STUDY))
    assert run_case(["run", path, "--out", tmp_path / "out", "--quiet"], cwd=tmp_path).reached


# ---------------------------------------------------------------------------------------------- 3. audit inputs

def _write_image(path: Path, kind: str) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(len(path.name))
    rgb = rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)
    if kind == "zero-byte":
        path.write_bytes(b"")
    elif kind == "corrupt":
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 5)
    elif kind == "text":
        path.write_text("not an image")
    elif kind == "cmyk":
        Image.fromarray(rgb, "RGB").convert("CMYK").save(path.with_suffix(".jpg"))
    elif kind == "16-bit":
        Image.fromarray(rng.integers(0, 65535, (8, 8), dtype=np.uint16)).save(path)
    elif kind == "palette":
        Image.fromarray(rgb, "RGB").convert("P").save(path)
    elif kind == "rgba":
        Image.fromarray(rng.integers(0, 255, (8, 8, 4), dtype=np.uint8), "RGBA").save(path)
    elif kind == "gray":
        Image.fromarray(rgb[..., 0], "L").save(path)
    elif kind == "big":
        Image.fromarray(rng.integers(0, 255, (40, 24, 3), dtype=np.uint8), "RGB").save(path)
    elif kind == "1-bit":
        Image.fromarray(rgb[..., 0] > 127).save(path)


IMAGE_DAMAGE = ["zero-byte", "corrupt", "text", "cmyk", "16-bit", "palette", "rgba", "gray", "big", "1-bit"]
FOLDER_DAMAGE = ["empty-class", "one-class", "non-ascii", "image", "image", "image", "drop-class-images",
                 "nested", "hidden-file", "train-test-split", "train-only", "image-class-2"]
LIST_DAMAGE = ["unknown", "duplicate", "empty", "header-only", "binary", "absolute", "no-header", "test-file",
               "non-ascii", "ok"]


@st.composite
def audit_case(draw):
    return {
        "model": draw(st.sampled_from(["ok"] * 6 + ["state_dict", "dict", "tensor", "junk", "empty", "missing",
                                                    "wrong-outputs", "one-output", "wrong-channels", "directory"])),
        # the train/ and test/ layouts last: the other damages name files of the flat layout
        "folder": sorted(draw(st.lists(st.sampled_from(FOLDER_DAMAGE), max_size=2, unique=True)),
                         key=lambda d: d.startswith("train")),
        "image": draw(st.sampled_from(IMAGE_DAMAGE)),
        "list": draw(st.sampled_from([None, None, *LIST_DAMAGE])),
        "list_flag": draw(st.sampled_from(["--mislabeled", "--outliers"])),
        "flags": draw(st.lists(st.sampled_from([
            ["--image-size", "8"], ["--image-size", "0"], ["--image-size", "-3"], ["--image-size", "5"],
            ["--channels", "1"], ["--channels", "3"], ["--channels", "2"], ["--mean", "0.5,0.5,0.5"],
            ["--mean", "0.5"], ["--std", "0,0,0"], ["--test-fraction", "0.5"], ["--test-fraction", "1"],
            ["--test-fraction", "0"], ["--no-normalize"], ["--top-k", "0"], ["--top-k", "-1"],
            ["--max-examples", "0"], ["--max-examples", "1"], ["--shadow-models", "1"], ["--shadow-models", "4"],
            ["--transform", "nowhere.py:f"], ["--label-noise", "0.1"], ["--max-memory", "1KB"]]), max_size=2)),
    }


def build_audit_inputs(case: dict, assets, tmp: Path) -> list[str]:
    """Copy the good folder and model into ``tmp``, damage them as ``case`` says; the audit's argv."""
    import torch
    from torch import nn

    folder = tmp / "pictures"
    shutil.copytree(assets["pictures"], folder)
    for damage in case["folder"]:
        if damage == "empty-class":
            (folder / "c_empty").mkdir(exist_ok=True)
        elif damage == "one-class":
            for c in ("c1", "c2"):
                shutil.rmtree(folder / c, ignore_errors=True)
        elif damage == "non-ascii":
            if (folder / "c1").exists():
                (folder / "c1").rename(folder / "клас-ü")
            if (folder / "c0" / "img1.png").exists():
                (folder / "c0" / "img1.png").rename(folder / "c0" / "图像 1.png")
        elif damage == "image":
            _write_image(folder / "c0" / "img0.png", case["image"])
        elif damage == "image-class-2" and (folder / "c2").exists():
            _write_image(folder / "c2" / "img5.png", case["image"])
        elif damage == "drop-class-images":
            for p in (folder / "c2").glob("*") if (folder / "c2").exists() else []:
                p.unlink()
        elif damage == "nested":
            (folder / "c0" / "sub").mkdir(exist_ok=True)
            shutil.copy(assets["pictures"] / "c0" / "img2.png", folder / "c0" / "sub" / "x.png")
        elif damage == "hidden-file":
            (folder / "c0" / ".DS_Store").write_bytes(b"\x00\x01")
        elif damage in ("train-test-split", "train-only") and not (folder / "train").exists():
            classes = [p for p in folder.iterdir() if p.is_dir()]
            (folder / "train").mkdir()
            for c in classes:
                c.rename(folder / "train" / c.name)
            if damage == "train-test-split":
                shutil.copytree(folder / "train", folder / "test")
    model = tmp / "model.pt"
    good = torch.load(assets["folder_model"], weights_only=False)
    kind = case["model"]
    if kind == "ok":
        shutil.copy(assets["folder_model"], model)
    elif kind == "state_dict":
        torch.save(good.state_dict(), model)
    elif kind == "dict":
        torch.save({"model": "not one", "epoch": 3}, model)
    elif kind == "tensor":
        torch.save(torch.zeros(3), model)
    elif kind == "junk":
        model.write_bytes(b"\x80\x04junk" * 9)
    elif kind == "empty":
        model.write_bytes(b"")
    elif kind == "directory":
        model.mkdir()
    elif kind == "wrong-outputs":
        torch.save(nn.Sequential(*list(good)[:-1], nn.Linear(4 * 8 * 8, 7)), model)
    elif kind == "one-output":
        torch.save(nn.Sequential(*list(good)[:-1], nn.Linear(4 * 8 * 8, 1)), model)
    elif kind == "wrong-channels":
        torch.save(nn.Sequential(nn.Conv2d(5, 4, 3, padding=1), *list(good)[1:]), model)
    argv = ["audit", "--model", model, "--data-folder", folder, "--out", tmp / "out", "--quiet", "--max-examples",
            "12", "--top-k", "3"]
    if case["list"] is not None:
        listing = tmp / "list.csv"
        text = {"unknown": "file\nc0/nope.png\n", "duplicate": "file\nc0/img2.png\nc0/img2.png\n", "empty": "",
                "header-only": "file\n", "absolute": f"file\n{folder / 'c0' / 'img2.png'}\n",
                "no-header": "c0/img2.png\n", "test-file": "file\ntest/c0/img2.png\n",
                "non-ascii": "file\nc0/图像 1.png\n", "ok": "file\nc0/img3.png\n"}.get(case["list"])
        if text is None:
            listing.write_bytes(b"\xff\xfe\x00bin")
        else:
            listing.write_text(text, encoding="utf-8")
        argv += [case["list_flag"], listing]
    return argv + [x for flag in case["flags"] for x in flag]


@examples(150)
@given(case=audit_case())
def test_fuzz_audit_inputs(stubs, assets, case):
    with tempfile.TemporaryDirectory(prefix="bnmem-fuzz-") as tmp:
        argv = build_audit_inputs(case, assets, Path(tmp))
        run_case(argv, cwd=Path(tmp))


def test_fuzz_audit_rerun_after_fix(assets, tmp_path):
    """A state_dict fails in one line; the audit of the module it came from then runs to its end (no stubs)."""
    import torch

    case = {"model": "state_dict", "folder": [], "image": "gray", "list": "ok", "list_flag": "--mislabeled",
            "flags": []}
    argv = build_audit_inputs(case, assets, tmp_path)
    r = run_case(argv, cwd=tmp_path)
    assert r.code == 2 and "state_dict" in error_line(r.err)
    assert not any(Path(p).name in FINISHED for p in files_under(tmp_path / "out"))
    torch.save(torch.load(assets["folder_model"], weights_only=False), tmp_path / "model.pt")
    r = run_case(argv, cwd=tmp_path)
    assert r.code == 0, r.err
    assert (tmp_path / "out" / "audit.json").exists()


# ---------------------------------------------------------------------------------------------- 4. run directories

RUN_STUDY = {"name": "fzrun", "data": {"dataset": "digits", "train_size": 120}, "train": {"epochs": 1},
             "norms": ["batch", "none"], "grid": {"seeds": [0], "replicates": 2, "outliers": [{"label_noise": 0.1}]},
             "lenses": {"memorize": {}}}
REPORT_OUTPUTS = ("report.html", "summary.md", "summary.csv", "results.csv", "figures")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A real finished study (2 replicates of memorize, 1 epoch on 120 digits), without its report."""
    root = tmp_path_factory.mktemp("fuzz-run")
    (root / "study.yaml").write_text(yaml.safe_dump(RUN_STUDY))
    with in_directory(root):
        r = invoke(["run", "study.yaml", "--out", "run", "--workers", "1", "--quiet"])
    assert r.code == 0, r.err
    return root / "run"


DAMAGES = ["delete", "empty", "half", "json-list", "json-empty", "binary", "directory", "foreign-line"]


def damage(path: Path, how: str) -> None:
    """Damage one file (or folder) of a run as a crash, a full disk or a stray tool would."""
    if path.is_dir():
        shutil.rmtree(path)
        if how == "directory":
            path.write_text("a file where a folder was")
        return
    data = path.read_bytes()
    if how == "delete":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "half":
        path.write_bytes(data[: len(data) // 2])
    elif how == "json-list":
        path.write_text("[1, 2, 3]")
    elif how == "json-empty":
        path.write_text("{}")
    elif how == "binary":
        path.write_bytes(b"\x00\xff\xfe" * 11)
    elif how == "directory":
        path.unlink()
        path.mkdir()
    elif how == "foreign-line":
        path.write_bytes(data + b"\n<<<<<<< foreign\n")


def run_files(run: Path) -> list[str]:
    return sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.name not in REPORT_OUTPUTS)


@examples(60)
@given(data=st.data())
def test_fuzz_damaged_run_directories(finished_run, data):
    damaged_run_property(finished_run, data, DAMAGES, ["report", "export", "export", "compare", "compare-recompute"])


def damaged_run_property(finished_run: Path, data, damages: list[str], commands: list[str]) -> None:
    names = run_files(finished_run)
    picks = data.draw(st.lists(st.tuples(st.sampled_from(names), st.sampled_from(damages)), min_size=1, max_size=2))
    command = data.draw(st.sampled_from(commands))
    with tempfile.TemporaryDirectory(prefix="bnmem-fuzz-") as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(finished_run, run)
        for name, how in picks:
            if (run / name).exists():
                damage(run / name, how)
        argv = {"report": ["report", run], "export": ["export", run, "--quiet"],
                "compare": ["compare", finished_run, run, "--quiet"],
                "compare-recompute": ["compare", run, finished_run, "--recompute", "--quiet"]}[command]
        run_case(argv, cwd=Path(tmp), watch=run)


def test_the_fuzzer_fails_when_a_validator_is_removed(finished_run, monkeypatch):
    """The planted bug of issue 39's 'done when': the run reader's check that a JSON document is an object, removed
    (its code before the fuzzer found the crash). The damaged-run family must then fail."""
    import json

    from bnmem.report import rundata

    def unchecked(path, problems):
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            problems.append(f"{path}: unreadable ({e})")
            return None

    monkeypatch.setattr(rundata, "_read_json", unchecked)

    @settings(max_examples=40, deadline=None)
    @given(data=st.data())
    def fuzz(data):
        damaged_run_property(finished_run, data, ["json-list", "json-empty"], ["export"])

    from hypothesis.errors import HypothesisException

    with pytest.raises(Exception) as caught:  # the crash (a traceback) or the property's assertion
        fuzz()
    assert not isinstance(caught.value, HypothesisException), caught.value
    # and without the planted bug the same cases pass
    monkeypatch.undo()
    fuzz()


@pytest.mark.parametrize("name, how", [("DONE", "delete"), ("index.json", "half"),
                                       ("digits-lenet-flip0.1-r0/memorize/metrics.json", "binary"),
                                       ("digits-lenet-flip0.1-r1/memorize/batch/seed1000/model.pt", "empty")])
def test_fuzz_damaged_run_resumes_or_fails_in_one_line_and_the_fixed_run_reports(finished_run, tmp_path, name, how):
    """Rerunning the study on a damaged run either repairs it or says what to remove; after the fix (the damaged
    piece removed), the rerun finishes and the report is written."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(RUN_STUDY))
    damage(run / name, how)
    argv = ["run", "study.yaml", "--out", "run", "--workers", "1", "--quiet"]
    r = run_case(argv, cwd=tmp_path, watch=run)
    if r.code == 2:
        target = run / name
        (shutil.rmtree if target.is_dir() else Path.unlink)(target)
        r = run_case(argv, cwd=tmp_path, watch=run)
    assert r.code == 0, r.err
    assert run_case(["report", run], cwd=tmp_path).code == 0
    assert (run / "summary.csv").exists()


# ---------------------------------------------------------------------------------------------- real processes

@pytest.mark.parametrize("argv", [["memorize", "--arch", "vgg"], ["run", "NOFILE.yaml"],
                                  ["audit", "--model", "NOFILE.pt"], ["report", "."], ["lira", "--device", "tpu"]])
def test_fuzz_subprocess_one_line(tmp_path, argv):
    """The in-process property holds for a real process too (interpreter start, sys.exit, stderr encoding)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "bnmem", *argv], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 2, p.stderr
    error_line(p.stderr)
    assert not any(Path(f).name in FINISHED for f in files_under(tmp_path))
