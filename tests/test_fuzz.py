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

from fuzz_support import (FINISHED, TINY_STUDY, assets, check_outcome, engine_stubs, error_line, examples,
                          files_under, in_directory, invoke, run_case, stubs)
from bnmem.names import ARCH_ALIASES, ARCHS, DATASETS, NORMS

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
    return st.one_of(st.integers(-2, 100).map(str), st.floats(-1, 2).map(repr),
                     st.sampled_from(["2147483648", "10000000000"]), junk)


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
    if command in ("report", "export", "verify"):
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
        skip = ("report", "export", "compare", "verify")  # their base runs on no run: never a passing rerun
        command = draw(st.sampled_from(sorted(c for c in VALUED if c not in skip)))
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
