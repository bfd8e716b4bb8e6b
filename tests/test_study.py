"""Studies (``bnmem run``): validation, grid expansion, a tiny end-to-end study, resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bnmem import io
from bnmem.cli import main
from bnmem.errors import BnmemError
from bnmem.study import Study, expand_grid, index_doc, load_study, build_jobs, run_study

STUDIES = Path(__file__).resolve().parents[1] / "studies"

# Small enough for a test: 200 digits, 2 epochs, one seed, 4 shadow models.
TINY = {
    "name": "tiny",
    # A validation split for every lens: mitigate selects λ on one (it carves 10% when none is
    # set), and lenses share (norm, seed) runs only when their data is the same.
    "data": {"dataset": "digits", "train_size": 200, "val_fraction": 0.1},
    "train": {"epochs": 2, "batch_size": 32},
    # The paper's protocol (one shared recipe) alone: the fair-arms default is tested on its own below.
    "grid": {"norms": ["batch", "none"], "seeds": [0], "outliers": [{"label_noise": 0.05}, {"ood": 0.05}],
             "recipes": ["shared"]},
    "lenses": {
        "memorize": {},
        "gradnorms": {"at": [1, 2]},
        "gamma-sigma": {},
        "mitigate": {"lambdas": [1.0], "fixed_epoch": 1},
        "lira": {"shadow_models": 4},
        "rmia": None,
        "theory": {"steps": 20, "plot": False},
    },
}


def write_study(tmp_path: Path, doc: dict | str, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def one_error_line(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("bnmem: error:"), err
    return lines[0]


# --- validation ---------------------------------------------------------------------------


def _with(path: str, value) -> dict:
    """TINY with one nested key set (``a.b.c``)."""
    doc = json.loads(json.dumps(TINY))
    node = doc
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return doc


@pytest.mark.parametrize(
    "doc, fragment",
    [
        (_with("grid.datasetz", ["digits"]),
         "grid.datasetz: Extra inputs are not permitted (did you mean datasets?)"),
        (_with("train.lrr", 0.1), "train.lrr: Extra inputs are not permitted (did you mean lr?)"),
        (_with("lenses.lira.shadow_modelz", 8),
         "lenses.lira.shadow_modelz: Extra inputs are not permitted (did you mean shadow_models?)"),
        (_with("lenses.theory.stepz", 8), "lenses.theory.stepz: Extra inputs are not permitted (did you mean steps?)"),
        (_with("grid.outliers", [{"label_noize": 0.1}]), "grid.outliers.0.label_noize: Extra inputs are not "
                                                         "permitted (did you mean label_noise?)"),
        (_with("train.zzzz", 1), "train.zzzz: Extra inputs are not permitted"),
        (_with("lenses.rmia", {"gamma": 2}), "rmia: it runs the lira lens and takes no options of its own"),
        (_with("lenses.nonsense", {}), "lenses: unknown lens 'nonsense'; choose one of memorize"),
        (_with("grid.outliers", [{"label_noise": 1.5}]), "grid.outliers.0.label_noise: rate 1.5 is outside [0, 1)"),
        (_with("grid.datasets", ["imagenet"]), "grid.datasets: unknown dataset 'imagenet'"),
        (_with("grid.norms", ["batch", "weird"]), "grid.norms: unknown norm 'weird'"),
        (_with("lenses.lira.shadow_models", 5), "lenses.lira.shadow_models: must be even and at least 4, got 5"),
        (_with("lenses.gradnorms.at", [1, 9]), "lenses.gradnorms: checkpoint epoch 9 is past the last epoch (2)"),
        (_with("lenses.memorize.data", {"label_noise": 0.1}), "lenses.memorize.data.label_noise: the grid sets it"),
        (_with("lenses", []), "lenses: name at least one of"),
        (_with("name", "has space"), "name: String should match pattern"),
    ],
)
def test_bad_study_one_line(tmp_path, capsys, doc, fragment):
    line = one_error_line(capsys, ["run", str(write_study(tmp_path, doc)), "--out", str(tmp_path / "o"), "--quiet"])
    assert fragment in line
    assert "zzzz" not in line or "did you mean" not in line  # no suggestion where nothing is close
    assert not (tmp_path / "o").exists()  # nothing written before the study validates


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("name: x\nlenses: [memorize\n", "is not valid YAML"),
        ("name: x\n  lenses: {}\n", "at line 2"),
        ("- just\n- a list\n", "must hold a mapping"),
    ],
)
def test_malformed_yaml_one_line(tmp_path, capsys, text, fragment):
    assert fragment in one_error_line(capsys, ["run", str(write_study(tmp_path, text)), "--out", str(tmp_path / "o")])


def test_missing_file_and_bad_set(tmp_path, capsys):
    assert "does not exist" in one_error_line(capsys, ["run", str(tmp_path / "nope.yaml")])
    path = write_study(tmp_path, TINY)
    assert "--set expects KEY=VALUE" in one_error_line(capsys, ["run", str(path), "--set", "oops"])
    assert "train.epochs: Input should be greater than or equal to 1" in one_error_line(
        capsys, ["run", str(path), "--set", "train.epochs=0"])


def test_set_overrides_and_lens_switches(tmp_path):
    path = write_study(tmp_path, TINY)
    study = load_study(path, ["train.lr=0.1", "lenses.gradnorms=false", "grid.seeds=[3, 4]"])
    assert study.train.lr == 0.1
    assert "gradnorms" not in study.lenses.enabled()
    assert expand_grid(study)[0].seeds == (3, 4)


# --- grid expansion -----------------------------------------------------------------------


def test_clean_false_keeps_a_lens_out_of_clean_cells_only():
    """``clean: false`` allots a lens to the cells that inject outliers; the others still run on clean data, and a
    clean cell whose only training lens is gamma-sigma shares no run."""
    doc = _with("grid.outliers", [{"label_noise": 0.05}, {}])
    doc["lenses"] = {"memorize": {"clean": False}, "gradnorms": {"clean": False}, "gamma-sigma": {}}
    cells, jobs = build_jobs(Study.model_validate(doc))
    lenses_in = {c.id: {j.lens for j in jobs if j.id.startswith(c.id + "/")} for c in cells}
    assert lenses_in == {"digits-lenet-flip0.05": {"memorize", "gradnorms", "gamma-sigma", "shared-training"},
                         "digits-lenet-clean": {"gamma-sigma"}}
    doc["lenses"]["memorize"] = {}  # default: every cell
    cells, jobs = build_jobs(Study.model_validate(doc))
    assert {j.id for j in jobs if j.lens == "memorize"} == {"digits-lenet-flip0.05/memorize", "digits-lenet-clean/memorize"}




def test_grid_expansion_and_index():
    doc = _with("grid.datasets", ["digits", "mnist"])
    doc["grid"]["archs"] = ["lenet", "resnet"]
    study = Study.model_validate(doc)
    cells, jobs = build_jobs(study)
    assert [c.id for c in cells][:3] == ["digits-lenet-flip0.05", "digits-lenet-ood0.05-noise", "digits-resnet20-flip0.05"]
    assert len(cells) == 2 * 2 * 2
    by_lens = {}
    for j in jobs:
        by_lens.setdefault(j.lens, []).append(j)
    # theory once; memorize, gradnorms, gamma-sigma, mitigate, lira per cell (rmia rides on lira);
    # per cell one shared training run per (norm, seed) that two lenses train identically.
    assert len(by_lens["theory"]) == 1 and jobs[0].lens == "theory"
    lenses = ("memorize", "gradnorms", "gamma-sigma", "mitigate", "lira")
    assert all(len(by_lens[lens]) == len(cells) for lens in lenses)
    assert len(by_lens["shared-training"]) == 2 * len(cells)  # batch/seed0 (4 lenses), none/seed0 (3)
    targets = {j.work.norm: sorted(t.lens for t in j.work.targets) for j in by_lens["shared-training"]}
    assert targets == {"batch": ["gamma-sigma", "gradnorms", "memorize", "mitigate"],
                       "none": ["gradnorms", "memorize", "mitigate"]}
    # Without a study-wide validation split, mitigate's data (its own 10% split) differs: it trains alone.
    no_val = Study.model_validate({**doc, "data": {k: v for k, v in doc["data"].items() if k != "val_fraction"}})
    no_val_jobs = [j for j in build_jobs(no_val)[1] if j.lens == "shared-training"]
    assert all("mitigate" not in [t.lens for t in j.work.targets] for j in no_val_jobs)
    assert [j.stage for j in jobs] == sorted(j.stage for j in jobs) and jobs[-1].lens == "lira"
    assert all(j.config.seeds == [0] and j.config.shadow_models == 4 for j in by_lens["lira"])
    assert all(j.config.norms == ["batch"] for j in by_lens["gamma-sigma"])
    mem = next(j for j in jobs if j.id == "digits-lenet-flip0.05/memorize")
    assert mem.config.data.label_noise == 0.05 and mem.config.data.ood == 0.0
    index = index_doc(study, cells, jobs)
    assert index["study"] == "tiny" and index["theory"] == "theory"
    first = index["cells"][0]
    assert set(first) == {"id", "dataset", "arch", "norms", "seeds", "label_noise", "ood", "ood_source", "lenses"}
    assert first["lenses"]["rmia"] == first["lenses"]["lira"] == "digits-lenet-flip0.05/lira"
    assert first["lenses"]["gamma-sigma"] == "digits-lenet-flip0.05/gamma-sigma"
    assert index["cells"][1]["ood_source"] == "noise" and first["ood_source"] is None


def test_no_sharing_when_recipes_differ():
    doc = _with("lenses.memorize", {"epochs": 1})
    _, jobs = build_jobs(Study.model_validate(doc))
    shared = [j for j in jobs if j.lens == "shared-training"]
    # memorize now trains its own runs; the others still share theirs.
    assert all("memorize" not in [t.lens for t in j.work.targets] for j in shared)
    assert len(shared) == 4  # 2 cells x (batch, none)


def test_lens_epochs_shorthand_and_rmia_alone():
    doc = _with("lenses", {"memorize": {"epochs": 3}, "rmia": None})
    cells, jobs = build_jobs(Study.model_validate(doc))
    mem = next(j for j in jobs if j.lens == "memorize")
    assert mem.config.train.epochs == 3
    assert any(j.lens == "lira" for j in jobs)  # rmia alone runs lira


# study -> (cells, jobs): every paper-scale study is 3 archs x 4 outlier mixtures; per cell
# Paper-scale presets: per cell 5 lens jobs and 6 shared training runs (batch and none x 3 seeds), plus theory.
# The demo: 3 outlier settings x 3 replicates, the shared recipe: theory + per outlier cell 5 lens jobs and one
# shared-training job per norm (2); per clean cell gamma-sigma and lira (memorize, gradnorms, mitigate: clean: false).
# Cells and jobs: the paper's protocol's cells (theory, per corrupted cell 5 lenses + 2 shared runs, per clean cell
# gamma-sigma and lira), then fair arms' (per setting one recipe selection; memorize in corrupted cells, lira in all).
READY = {"demo": (9 + 9, 1 + 6 * (5 + 2) + 3 * 2 + 3 + 6 + 9),
         **{name: (12 + 12, 1 + 12 * (5 + 2) + 12 * (1 + 2)) for name in ("mnist", "fashion-mnist", "cifar10", "cifar100")}}
LENSES_OF = {"defenses": {"defenses"},
             # the decisive study's follow-ups for the claims it could not power (issue 37)
             "decisive-claim2": {"memorize", "gradnorms"}, "decisive-claim6": {"mitigate", "lira"},
             # the paper-scale LiRA on one GPU with the fast network pair (issue 49)
             "cifar10-fast": {"lira"}}


@pytest.mark.parametrize("path", sorted(STUDIES.glob("*.yaml")), ids=lambda p: p.name)
def test_ready_studies_validate(path):
    study = load_study(path)
    cells, jobs = build_jobs(study)
    assert len({c.id for c in cells}) == len(cells)
    expected = LENSES_OF.get(path.stem, {"memorize", "gradnorms", "gamma-sigma", "mitigate", "lira", "theory"})
    assert set(study.lenses.enabled()) == expected
    if "lira" in expected:
        assert study.lenses.asked()["rmia"] == "lira"  # rmia runs the lira lens
    if path.stem in READY:
        assert (len(cells), len(jobs)) == READY[path.stem]


def test_ready_studies_present():
    names = {p.stem for p in STUDIES.glob("*.yaml")}
    assert {"demo", "mnist", "fashion-mnist", "cifar10", "cifar100"} <= names


# --- running ------------------------------------------------------------------------------

RESULT_SUFFIXES = (".json", ".npy", ".npz", ".pt")
# Files that record when/where/how long, not what was computed.
NOT_RESULTS = ("DONE", "environment.json")


def result_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.suffix in RESULT_SUFFIXES and p.name not in NOT_RESULTS
        and not p.name.startswith(".")
    }


def mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("tiny")
    study = Study.model_validate(TINY)
    out = base / "run"
    result = run_study(study, out, progress=False)
    return study, out, result


def test_tiny_study_runs(tiny_run):
    study, out, result = tiny_run
    assert io.is_done(out)
    # theory + per cell: 2 shared training runs, memorize, gradnorms, gamma-sigma, mitigate, lira
    assert all(j["status"] == "done" for j in result.jobs) and len(result.jobs) == 1 + 2 * 7
    index = io.read_json(out / "index.json")
    assert [c["id"] for c in index["cells"]] == ["digits-lenet-flip0.05", "digits-lenet-ood0.05-noise"]
    for cell in index["cells"]:
        assert set(cell["lenses"]) == {"memorize", "gradnorms", "gamma-sigma", "mitigate", "lira", "rmia"}
        for lens, rel in cell["lenses"].items():
            assert io.is_done(out / rel), (lens, rel)
            assert (out / rel / ("gamma_sigma.json" if lens == "gamma-sigma" else "metrics.json")).is_file()
        assert not (out / cell["id"] / "_shared").exists()  # scratch training runs are cleaned up
    assert (out / index["theory"] / "theory.json").is_file()
    mem = io.read_json(out / "digits-lenet-flip0.05/memorize/metrics.json")
    assert mem["conditions"]["label_noise"] == 0.05
    lira = io.read_json(out / "digits-lenet-flip0.05/lira/metrics.json")
    assert "rmia" in lira["batch"] and lira["conditions"]["shadow_models"] == 4
    assert "noisy_in" in lira["accuracy"]["batch"]  # the shadow models' memorization, reported by lira
    shadow_gs = io.read_json(out / "digits-lenet-flip0.05/lira/shadow_gamma_sigma.json")
    assert len(shadow_gs["summary"]["frac_above_1"]["per_model"]) == 4
    assert set(shadow_gs["layers"]) == {"norm1", "norm2", "norm3", "norm4"}
    assert io.read_json(out / "study.json")["name"] == "tiny"


def test_shared_training_matches_standalone_lenses(tiny_run, tmp_path):
    """Each lens fed by the shared runs writes exactly what it writes when run on its own."""
    from bnmem.lenses import registry

    study, out, _ = tiny_run
    _, jobs = build_jobs(study)
    for lens in ("memorize", "gradnorms", "gamma-sigma", "mitigate"):
        job = next(j for j in jobs if j.id == f"digits-lenet-flip0.05/{lens}")
        alone = tmp_path / lens
        spec = registry.get(lens)
        spec.run(job.config, alone, progress=False)
        got, want = result_files(out / job.folder), result_files(alone)
        assert got.keys() == want.keys(), lens
        assert [k for k in got if got[k] != want[k]] == [], lens


def test_all_cells_lira_at_once_matches_standalone(tiny_run, tmp_path):
    """The study submits every cell's shadow-model chunks (then query chunks) in one go; each cell's
    lira folder still holds exactly what `bnmem lira` writes on its own, one cell after another."""
    from bnmem.lenses import registry

    study, out, _ = tiny_run
    _, jobs = build_jobs(study)
    lira = registry.get("lira")
    cells = [j for j in jobs if j.lens == "lira"]
    assert len(cells) == 2
    for job in cells:
        alone = tmp_path / job.folder
        lira.run(job.config, alone, progress=False)
        got, want = result_files(out / job.folder), result_files(alone)
        assert got.keys() == want.keys() and any(k.endswith("metrics.json") for k in got)
        assert [k for k in got if got[k] != want[k]] == [], job.folder


def test_phases_are_submitted_for_all_cells_at_once(tmp_path):
    """One worker runs the study's graph level by level: each chunk phase is one map over every cell's pending
    chunks (what puts them all in flight on a cluster); the lens jobs then find them finished."""
    from bnmem.executors.local import LocalExecutor
    from bnmem.shadow.training import ShadowChunk
    from bnmem.study import run_study

    study = Study.model_validate({**TINY, "lenses": {"lira": {"shadow_models": 4, "chunk_size": 2}}})
    calls = []

    class Recording(LocalExecutor):
        def map(self, fn, specs, desc="jobs", resources=None):
            job = fn.args[0]  # the graph's guarded(job, spec)
            # a chunk names its norm's folder; a study job is bound to the run directory
            cells = sorted({s.run_dir.split("/")[-3] if isinstance(s, ShadowChunk) else s.work.out.parts[-2]
                            for s in specs})
            calls.append((job.__name__, cells, len(specs)))
            return super().map(fn, specs, desc, resources)

    run_study(study, tmp_path / "run", executor=Recording(progress=False), progress=False)
    both = ["digits-lenet-flip0.05", "digits-lenet-ood0.05-noise"]
    # 2 cells x 2 norms x 2 chunks of 2 models, trained then queried: one map each; then both lens jobs.
    assert calls == [("train_chunk_job", both, 8), ("query_chunk_job", both, 8), ("run_job", both, 2)]
    calls.clear()
    run_study(study, tmp_path / "run", executor=Recording(progress=False), progress=False)
    assert calls == []  # all finished: nothing submitted


def test_rerun_skips_everything(tiny_run, capsys):
    study, out, _ = tiny_run
    before = mtimes(out)
    result = run_study(study, out, progress=False)
    assert all(j["status"] == "skipped" for j in result.jobs)
    assert mtimes(out) == before


def test_rerun_with_other_study_refused(tiny_run, tmp_path, capsys):
    _, out, _ = tiny_run
    path = write_study(tmp_path, _with("train.lr", 0.2))
    line = one_error_line(capsys, ["run", str(path), "--out", str(out), "--quiet"])
    assert "holds a run with a different configuration (study.json)" in line


def test_interrupted_study_resumes_identically(tiny_run, tmp_path, monkeypatch):
    _, reference, _ = tiny_run
    import dataclasses

    import bnmem.train.ensemble_runs as engine_mod
    from bnmem.lenses import registry

    study = Study.model_validate(TINY)
    real_train = engine_mod.train_runs_together
    calls = {"n": 0}

    def flaky_train(model_cfg, ds, cfgs, seeds, run_dirs, hooks, **kwargs):
        # The OOD cell's shared BN runs crash at their 2nd epoch, the first time they train (whichever job
        # order the schedule takes).
        if calls["n"] or "digits-lenet-ood0.05-noise/_shared/batch" not in Path(run_dirs[0]).as_posix():
            return real_train(model_cfg, ds, cfgs, seeds, run_dirs, hooks, **kwargs)
        calls["n"] += 1

        def crash_at_2(hook):
            def wrapped(epoch, model):
                if epoch == 2:
                    raise RuntimeError("simulated crash")
                return hook(epoch, model) if hook else None
            return wrapped

        return real_train(model_cfg, ds, cfgs, seeds, run_dirs, [crash_at_2(h) for h in hooks], **kwargs)

    def broken_lira(*args, **kwargs):
        raise RuntimeError("simulated lira crash")

    monkeypatch.setattr(engine_mod, "train_runs_together", flaky_train)
    monkeypatch.setitem(registry._REGISTRY, "lira", dataclasses.replace(registry.get("lira"), run=broken_lira))
    out = tmp_path / "run"
    with pytest.raises(BnmemError, match=r"jobs failed \(first: .*RuntimeError: simulated crash"):
        run_study(study, out, progress=False)
    assert not io.is_done(out)
    errors = {p.relative_to(out).as_posix() for p in out.rglob("ERROR.txt")}
    # The crashed shared run (its lenses then trained that run themselves) and both lira jobs.
    assert errors == {"digits-lenet-ood0.05-noise/_shared/batch/ERROR.txt",
                      "digits-lenet-flip0.05/lira/ERROR.txt", "digits-lenet-ood0.05-noise/lira/ERROR.txt"}
    assert io.read_json(out / "index.json") == io.read_json(reference / "index.json")

    monkeypatch.undo()
    result = run_study(study, out, progress=False)
    assert io.is_done(out)
    assert not list(out.rglob("ERROR.txt"))
    statuses = {j["id"]: j["status"] for j in result.jobs}
    assert statuses["theory"] == "skipped" and statuses["digits-lenet-flip0.05/lira"] == "done"

    got, want = result_files(out), result_files(reference)
    assert got.keys() == want.keys()
    assert [k for k in got if got[k] != want[k]] == []


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_study(tmp_path, TINY)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # no run directory, no runs/
    _, jobs = build_jobs(Study.model_validate(TINY))
    assert f"{len(jobs)} jobs" in text and "digits-lenet-flip0.05/lira" in text
    # 4 shadow models x 2 norms x 1 view (no training augmentation: identity) x 4 bytes x 2 (φ and its
    # float32 residual) x (candidates + the 899 test images, RMIA's population), over the two cells: 180 and
    # 189 candidates (200 less the 10% validation split; the OOD cell appends 9 images)
    assert 4 * 2 * 1 * 4 * 2 * ((180 + 899) + (189 + 899)) == 138_688
    # plus per norm and candidate: int16 predictions per model and view (2 x 4 x 1), the two float64
    # leave-one-model-out score arrays (2 x 8 x 4) and 16 float64 per-example vectors of mem_scores.npz
    assert 138_688 + 2 * (2 * 4 + 2 * 8 * 4 + 16 * 8) * (180 + 189) == 286_288
    assert "attack inputs 286.3 KB" in text and "estimated disk:" in text


def test_replicates_and_recipes_expand_into_cells():
    """grid.replicates shifts the corruption and model seeds per replicate; grid.recipes adds per-norm-recipe
    cells that run only the lenses taking a recipe."""
    doc = {**TINY, "grid": {**TINY["grid"], "outliers": [{"label_noise": 0.05}], "replicates": 2,
                            "recipes": ["shared", "per-norm"]}}
    study = Study.model_validate(doc)
    cells, jobs = build_jobs(study)
    assert [c.id for c in cells] == ["digits-lenet-flip0.05-r0", "digits-lenet-flip0.05-r1",
                                     "digits-lenet-flip0.05-pernorm-r0", "digits-lenet-flip0.05-pernorm-r1"]
    by_id = {j.id: j for j in jobs}
    r0, r1 = by_id["digits-lenet-flip0.05-r0/memorize"].config, by_id["digits-lenet-flip0.05-r1/memorize"].config
    assert (r0.data.seed, r1.data.seed) == (0, 1)
    assert r0.seeds == [0] and r1.seeds == [1000]
    assert by_id["digits-lenet-flip0.05-r1/lira"].config.seeds == [1000]
    assert [by_id[f"digits-lenet-flip0.05-r{k}/lira"].config.keep_seed for k in (0, 1)] == [0, 1]
    per = sorted(j.lens for j in jobs if j.id.startswith("digits-lenet-flip0.05-pernorm-r0/"))
    assert per == ["lira", "memorize", "recipe-selection"]  # the setting's one selection lives in replicate 0
    assert by_id["digits-lenet-flip0.05-pernorm-r0/memorize"].config.recipe == "per-norm"
    assert r0.recipe == "shared"
    index = index_doc(study, cells, jobs)
    assert index["cells"][3]["replicate"] == 1 and index["cells"][3]["recipe"] == "per-norm"
    assert "recipe" not in index["cells"][0]
    # index.json (and summary.md's cell table) lists the model seeds each replicate trained with
    assert [c["seeds"] for c in index["cells"]] == [r0.seeds, r1.seeds, [0], [1000]] == [[0], [1000]] * 2


def test_fair_arms_are_the_default_and_select_once_per_setting(tmp_path):
    """A study that names no recipe runs fair arms (per-norm) beside the paper's protocol (shared), carving a
    validation split; one selection per setting (replicate 0's cell, `_recipe`) serves every replicate's
    memorize and lira, which train each norm with its selected learning rate and epochs; study.json records
    the selections; the paper's protocol cells train the shared recipe."""
    doc = {"name": "fair", "data": {"dataset": "digits", "train_size": 160},
           "train": {"epochs": 2, "batch_size": 32},
           "grid": {"norms": ["batch", "none"], "seeds": [0], "outliers": [{"label_noise": 0.05}], "replicates": 2,
                    "lr_grid": [0.02, 0.2], "max_epochs": 3},
           "lenses": {"memorize": {}, "lira": {"shadow_models": 4}}}
    study = Study.model_validate(doc)
    assert study.grid.recipes == ["per-norm", "shared"] and study.data.val_fraction == 0.1
    cells, jobs = build_jobs(study)
    selections = [j for j in jobs if j.lens == "recipe-selection"]
    assert [j.folder for j in selections] == ["digits-lenet-flip0.05-pernorm-r0/_recipe"]
    by_id = {j.id: j for j in jobs}
    for r in (0, 1):
        for lens in ("memorize", "lira"):
            job = by_id[f"digits-lenet-flip0.05-pernorm-r{r}/{lens}"]
            assert job.after == (selections[0].id,)
            assert job.config.recipe_from == "../../digits-lenet-flip0.05-pernorm-r0/_recipe"
        assert by_id[f"digits-lenet-flip0.05-r{r}/memorize"].config.recipe == "shared"
    out = tmp_path / "run"
    result = run_study(study, out, progress=False)
    assert all(j["status"] == "done" for j in result.jobs)
    sel = io.read_json(out / "digits-lenet-flip0.05-pernorm-r0/_recipe/recipe.json")
    assert sel["grid"] == [0.02, 0.2] and sel["rule"]["cap"] == 3 and sel["seeds"] == [0]
    recorded = io.read_json(out / "study.json")["selected_recipes"]["digits-lenet-flip0.05-pernorm-r0/_recipe"]
    for norm in ("batch", "none"):
        chosen = sel["per_norm"][norm]
        assert chosen["epochs"] == 3 and chosen["stop"] == "cap"  # the cap (3) is below the minimum epochs
        assert recorded["per_norm"][norm]["lr"] == chosen["lr"] and recorded["per_norm"][norm]["epochs"] == 3
        assert set(recorded["per_norm"][norm]["grid"]) == {"0.02", "0.2"}
        for r in (0, 1):
            mem = io.read_json(out / f"digits-lenet-flip0.05-pernorm-r{r}/memorize/metrics.json")
            assert mem[norm]["recipe"] == {"lr": chosen["lr"], "epochs": 3, "mode": "per-norm", "stop": "cap"}
            assert len(mem[norm]["per_seed"][str(1000 * r)]["noisy_acc"]) == 3  # trained the selected epochs
            lira = io.read_json(out / f"digits-lenet-flip0.05-pernorm-r{r}/lira/metrics.json")["conditions"]
            assert lira["lr_per_norm"][norm] == chosen["lr"] and lira["epochs_per_norm"][norm] == 3
            assert lira["recipe_selection"]["per_norm"] == sel["per_norm"]
            for lens in ("memorize", "lira"):  # no selection of their own
                own = out / f"digits-lenet-flip0.05-pernorm-r{r}" / lens
                assert not [*own.rglob("recipe.json"), *own.rglob("candidates.json")]
            # the paper's protocol: the shared recipe, for every norm
            shared = io.read_json(out / f"digits-lenet-flip0.05-r{r}/memorize/metrics.json")
            assert shared[norm]["recipe"] == {"lr": 0.05, "epochs": 2, "mode": "shared"}
    before = (out / "study.json").read_bytes()
    again = run_study(study, out, progress=False)  # resumes: the recorded selections do not block it
    assert all(j["status"] == "skipped" for j in again.jobs) and (out / "study.json").read_bytes() == before
    from bnmem.report.html import selection_rows
    from bnmem.report.rundata import load_run

    rows = selection_rows(load_run(out))
    assert {(r[1], r[2], r[3], r[4]) for r in rows} == {
        (n, f"{sel['per_norm'][n]['lr']:g}", "3", "cap") for n in ("batch", "none")}


def test_a_study_lens_may_not_select_its_own_recipe():
    doc = {**TINY, "grid": {**TINY["grid"], "recipes": ["per-norm"]}, "lenses": {"memorize": {"lr_grid": [0.1]}}}
    with pytest.raises(BnmemError, match="grid.lr_grid"):
        build_jobs(Study.model_validate(doc))


@pytest.mark.parametrize("off", ["lira", "rmia"])
def test_switching_a_lens_off_switches_off_its_aliases(off):
    """The demo lists both lira and its alias rmia: `--set lenses.lira=false` alone must plan no lira job."""
    study = load_study(STUDIES / "demo.yaml", [f"lenses.{off}=false"])
    assert "lira" not in study.lenses.enabled() and "rmia" not in study.lenses.asked()
    cells, jobs = build_jobs(study)
    assert cells and jobs and not [j for j in jobs if j.lens == "lira"]
    assert [j for j in build_jobs(load_study(STUDIES / "demo.yaml"))[1] if j.lens == "lira"]  # it does plan one when on


def test_a_set_typo_gets_did_you_mean(tmp_path, capsys):
    """`--set train.lrr=0.1` on a study and on a lens command: the closest key is suggested."""
    study = str(write_study(tmp_path, TINY))
    line = one_error_line(capsys, ["run", study, "--dry-run", "--set", "train.lrr=0.1"])
    assert "train.lrr: Extra inputs are not permitted (did you mean lr?)" in line
    line = one_error_line(capsys, ["memorize", "--epochs", "1", "--set", "train.lrr=0.1", "--out", str(tmp_path / "m")])
    assert "(did you mean lr?)" in line
