"""recommended.json and optimal_config(): the measured recommendation handed to a training script,
matched to the device, with a warning on software skew and a clear message where none exists."""

from __future__ import annotations

import functools
import json
import re

import pytest
from conftest import make_record, tiny_params, write_report_dir

from lib import optimal
from lib.core import paths, stages
from lib.core.params import Params
from lib.report import loader
from lib.results import recommendation
from lib.results import store

H100 = {"name": "NVIDIA H100 80GB HBM3", "backend": "cuda", "torch": "2.11.0+cu130", "cuda": "13.0"}


def _measured_report(root, name="h100", torch="2.11.0+cu130"):
    params = tiny_params(["fp32", "tf32"])
    params.name = name
    recs = [
        make_record(params, "fp32", 2, [100.0] * 6, [6.0] * 6),
        make_record(params, "tf32", 2, [50.0] * 6, [6.0] * 6),
    ]
    d = write_report_dir(root / name, params, recs)
    env = json.loads((d / "environment.json").read_text())
    env.update(torch=torch, cuda="13.0")
    (d / "environment.json").write_text(json.dumps(env))
    return d


def test_recommended_json_holds_the_switches_the_code_and_what_it_measured(tmp_path):
    rep = loader.load(_measured_report(tmp_path))
    rec = recommendation.write(rep)
    assert json.loads((rep.dir / recommendation.FILE).read_text()) == json.loads(json.dumps(rec))
    best = loader.recommended(rep)
    assert rec["stage"] == best["stage"] == "tf32" and rec["switches"] == {"tf32": True}
    assert rec["code"] == recommendation.applied_switches("tf32") == [stages.get("tf32").switch]
    assert rec["measured"]["tokens_per_s"] == best["processes"]["median"]
    assert rec["software"]["torch"] == "2.11.0+cu130" and rec["report"] == "reports/h100/report.pdf"


def test_no_recommendation_leaves_no_stale_file(tmp_path):
    d = _measured_report(tmp_path)
    rep = loader.load(d)
    recommendation.write(rep)
    params = Params.read(d / "params.json")
    for key in ("fp32", "tf32"):  # every configuration out of memory now: nothing to recommend
        store.write_atomic(
            store.record_path(d / "results", key, 2), make_record(params, key, 2, status="oom", reason="out of memory")
        )
    assert recommendation.write(loader.load(d)) is None and not (d / recommendation.FILE).exists()


def test_optimal_config_matches_the_device_to_its_profiles_report(tmp_path):
    recommendation.write(loader.load(_measured_report(tmp_path)))
    cfg = optimal.optimal_config(H100, reports=tmp_path)
    assert cfg["profile"] == "h100" and cfg["stage"] == "tf32"


def test_optimal_config_warns_when_the_software_differs(tmp_path):
    recommendation.write(loader.load(_measured_report(tmp_path, torch="2.9.1+cu128")))
    with pytest.warns(optimal.VersionSkew, match="torch 2.9.1\\+cu128 there, 2.11.0\\+cu130 here"):
        optimal.optimal_config(H100, reports=tmp_path)


def test_optimal_config_never_guesses_without_a_report(tmp_path):
    with pytest.raises(optimal.NoReport, match="measure it first: make report GPU=h100"):
        optimal.optimal_config(H100, reports=tmp_path)
    with pytest.raises(optimal.NoReport, match="measure it first: make report GPU=cpu"):
        optimal.optimal_config({"name": "x86_64", "backend": "cpu"}, reports=tmp_path)
    with pytest.raises(optimal.NoReport, match="no profile matches the cuda device 'Some Future GPU'"):
        optimal.optimal_config({"name": "Some Future GPU", "backend": "cuda"}, reports=tmp_path)


def test_optimal_config_reads_the_report_of_the_model_asked_for(tmp_path):
    recommendation.write(loader.load(_measured_report(tmp_path)))  # reports/h100: the profile's own preset
    assert optimal.optimal_config(H100, reports=tmp_path, model="gpt2")["profile"] == "h100"
    with pytest.raises(optimal.NoReport, match="model gpt2-xl.*h100-gpt2-xl.*make report GPU=h100 MODEL=gpt2-xl"):
        optimal.optimal_config(H100, reports=tmp_path, model="gpt2-xl")


def test_the_cpu_pipeline_writes_the_recommendation_optimal_config_returns(pipeline_ok):
    cfg = optimal.optimal_config({"name": "x86_64", "backend": "cpu"}, reports=pipeline_ok.reports)
    rep = loader.load(pipeline_ok.report_dir)
    best, recipe = loader.recommended(rep), rep.decided["recipe"]
    # one answer: the recommendation is the recipe, quoted as trained (its micro-batch with its accumulation steps)
    assert (cfg["stage"], cfg["micro_batch"], cfg["accumulation_steps"]) == (
        best["stage"],
        best["batch_size"],
        recipe["accumulation"],
    )
    assert cfg["measured"]["tokens_per_s"] == pytest.approx(recipe["tokens_per_s"])
    assert cfg["switches"] == {
        k: v for k, v in stages.get(best["stage"]).identity().items() if k not in ("key", "peak")
    }


def test_a_report_whose_params_name_no_global_batch_still_gets_its_recommendation(tmp_path):
    d = _measured_report(tmp_path)
    params = json.loads((d / "params.json").read_text())
    del params["evidence"]["global_batch_tokens"]  # as an older report's params.json (measurement method 1)
    (d / "params.json").write_text(json.dumps(params))
    rec = recommendation.write(loader.load(d))
    assert rec["stage"] == "tf32" and rec["accumulation_steps"] is None and rec["micro_batch"]


@pytest.mark.parametrize(("folder", "gpus"), [("h100", 1), ("h100-x4", 4)])
def test_recommended_json_is_the_recipe_the_host_trains_with_at_the_global_batch(folder, gpus):
    """reports/h100-x4's recommended.json described 4 GPUs x B=128 x 4 accumulation steps at its top level, four
    times GPT-2's batch (the DDP setting sat in a nested list). The top level is now what the host trains with:
    micro-batch x accumulation x GPUs x T = the global batch, on every GPU of the host where DDP was measured; the
    one-GPU recipe stands beside it."""
    rep = loader.load(paths.ROOT / "reports" / folder)
    rec = recommendation.record(rep)
    assert rec["gpus"] == gpus
    assert rec["micro_batch"] * rec["accumulation_steps"] * rec["gpus"] * rec["seq_len"] == rec["global_batch_tokens"]
    one = rec["one_gpu"]
    assert one["gpus"] == 1 and one["micro_batch"] * one["accumulation_steps"] * rec["seq_len"] == 524_288
    host = rep.decided["recipe"]["host"]
    expected = host["tokens_per_s"] if host else rep.decided["recipe"]["tokens_per_s"]
    assert rec["measured"]["tokens_per_s"] == expected


def test_the_readmes_python_blocks_run_against_the_cpu_pipelines_report(pipeline_ok, monkeypatch, capsys):
    """README's example read cfg["global_batch"], a key recommended.json no longer had (KeyError for a new user).
    Every ```python block of README.md now runs here, on this machine's report of the CPU default."""
    blocks = re.findall(r"```python\n(.*?)```", (paths.ROOT / "README.md").read_text(), re.S)
    assert blocks
    monkeypatch.setattr(
        optimal, "optimal_config", functools.partial(optimal.optimal_config, reports=pipeline_ok.reports)
    )
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip()
