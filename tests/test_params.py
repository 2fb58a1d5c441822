"""lib/core/params.py: the typed params. Every layer reads them as attributes; a report's params.json is
their to_dict() and reads back, from earlier versions of the tool too; the fingerprints of the committed
reports' records recompute from them unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lib.core import chapters, config, stages
from lib.core.params import ConfigError, Evidence, Params
from lib.results import store

REPORTS = Path(__file__).resolve().parent.parent / "reports"


@pytest.mark.parametrize("profile", config.profiles())
def test_every_profile_round_trips_through_its_dict(profile):
    params = config.load(profile)
    again = Params.from_dict(json.loads(json.dumps(params.to_dict())), "params.json")
    assert again == params and isinstance(again.evidence, Evidence)


@pytest.mark.parametrize("name", ["h100", "h200", "h100-x4"])
def test_the_committed_records_fingerprints_recompute_from_the_typed_params(name):
    """A measured configuration is found again by its fingerprint: the typed params must hash as the
    dicts they replaced did, or every committed report would be archived and measured again."""
    folder = REPORTS / name
    params, env = Params.read(folder / "params.json"), json.loads((folder / "environment.json").read_text())
    matrix = [
        rec
        for rec in map(json.loads, (p.read_text() for p in sorted((folder / "results").glob("*.json"))))
        if not rec.get("variant") and rec["stage"] in stages.STAGES and not stages.is_multi_gpu(rec["stage"])
    ]
    assert len(matrix) >= 10
    # as a re-render reads them (params.json) and as a resumed `make report` builds them (config.load)
    for read in (params, config.load(name)):
        for rec in matrix:
            assert store.fingerprint(read, env, stages.get(rec["stage"]), rec["batch_size"]) == rec["fingerprint"], rec
    changed, first = Params.read(folder / "params.json"), matrix[0]
    changed.run.seed += 1
    assert store.fingerprint(changed, env, stages.get(first["stage"]), first["batch_size"]) != first["fingerprint"]


def test_a_params_json_of_the_first_method_reads_with_what_it_lacks_as_none():
    # the two-H200 host measured by the first method, before the parity test and the depths (archived)
    params = Params.read(REPORTS / "archive" / "h200-x2-20261121-200726" / "params.json")
    assert params.method == 1 and params.evidence.parity_steps is None and params.evidence.baseline is None
    assert params.chapters is None and params.not_run == [] and params.run.seq_len == 1024  # None: every chapter


def test_a_merged_dict_that_lacks_a_key_or_has_a_stray_one_is_refused_in_one_line():
    good = config.load("cpu").to_dict()
    del good["evidence"]["held_out_batches"]
    with pytest.raises(ConfigError, match=r"^params/x\.yaml: evidence is missing held_out_batches$"):
        Params.from_dict(good, "params/x.yaml")
    stray = {**config.load("cpu").to_dict(), "colour": "red"}
    with pytest.raises(ConfigError, match=r"unknown key 'colour'"):
        Params.from_dict(stray, "params/x.yaml")
    assert Params.from_dict(stray, lenient=True).name == "cpu"  # a key an earlier version wrote is dropped


@pytest.mark.parametrize("key", ["name", "not_run", "method"])
def test_what_load_derives_cannot_be_set_in_a_params_file(tmp_params_dir, key):
    (tmp_params_dir / "mine.yaml").write_text(f"backend: cpu\n{key}: x\n")
    with pytest.raises(ConfigError, match=f"unknown key '{key}'"):
        config.load("mine")


@pytest.mark.parametrize(
    "key, allowed", [("family", False), ("peak_source", False), ("peak_tflops", True), ("skip", True)]
)
def test_a_params_file_may_set_null_only_where_null_means_none(tmp_params_dir, key, allowed):
    (tmp_params_dir / "mine.yaml").write_text(f"backend: cpu\n{key}: null\n")
    if allowed:
        assert getattr(config.load("mine"), key) is None
    else:
        with pytest.raises(ConfigError, match=f"'{key}' must be str, got null"):
            config.load("mine")


def test_a_profile_may_not_set_the_shape_its_preset_fixes(tmp_params_dir):
    (tmp_params_dir / "mine.yaml").write_text("backend: cpu\nmodel:\n  n_layer: 3\n")
    with pytest.raises(ConfigError, match=r"model: unknown key 'n_layer'"):
        config.load("mine")


def test_a_report_that_recorded_no_chapters_keeps_every_chapter_beyond_its_stages():
    """reports/h200 was measured before params named its chapters: it still has its batch-sweep chapter."""
    params = Params.read(REPORTS / "h200" / "params.json")
    assert "batch_sweep" in [c.key for c in chapters.order(params.stages, params.chapters)]
