"""The audit's advice on the listed outliers names the group as the report does and points to where each
example's own exposure is (exposure.csv), not to the top-k gradient norms, which are another group."""

from __future__ import annotations

from bnmem.auditing.advice import example_advice
from bnmem.auditing.exposure import EXPOSURE_FILE
from bnmem.auditing.report import group_name


def _risk(result: dict, level: str, upper: str, n: int = 30) -> dict:
    return {"groups": [{"group": "outliers", "name": group_name(result, "outliers", n), "level": level,
                        "level_upper": upper}]}


def test_outlier_advice_names_the_group_and_exposure_csv():
    folder = {"data": {"mislabeled_in_test": 0, "n_noisy": 24}}
    arrays = {"data": {"n_noisy": 20, "n_ood": 10}}
    (on_folder,) = example_advice(folder, _risk(folder, "low to moderate", "moderate", 24))
    (on_arrays,) = example_advice(arrays, _risk(arrays, "moderate", "moderate"))
    assert on_folder.startswith("Review the 24 files listed as mislabeled before release:")
    # array data's outliers are known masks (flipped labels and OOD samples), not files someone listed
    assert on_arrays.startswith("Review the 30 known outliers (mislabeled and out-of-distribution) before release:")
    for text in (on_folder, on_arrays):
        assert EXPOSURE_FILE in text and "top_k" not in text and "singles out" not in text
    assert "(their level: low to moderate)" in on_folder  # the group's level, both ends


def test_no_outlier_advice_where_the_group_is_low():
    arrays = {"data": {"n_noisy": 20}}
    assert example_advice(arrays, _risk(arrays, "low", "low")) == []
