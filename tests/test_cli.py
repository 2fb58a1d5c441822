"""Bad input: one line on stderr starting with "error:", exit code 2, nothing measured.

Most cases call lib.cli.main() in-process with the environment the Makefile would export
(validation runs before anything is measured); one runs the real `python -m lib.cli report`."""

from __future__ import annotations

import pytest
from conftest import CLI_ENV_VARS, ROOT, describe_proc, run_cli

from lib import cli
from lib.core import chapters, cli_args, config, paths, stages
from lib.run import pipeline, report_folder


@pytest.fixture
def run_main(monkeypatch, tmp_path, capsys):
    """Call cli.main(["report"]) with these environment variables; returns (code, stderr, reports)."""
    reports = tmp_path / "reports"

    def call(**env):
        for k in CLI_ENV_VARS:
            monkeypatch.delenv(k, raising=False)
        monkeypatch.setenv("REPORTS", str(reports))
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        code = cli.main(["report"])
        return code, capsys.readouterr().err, reports

    return call


def assert_refused(code, err, reports):
    lines = err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert not reports.exists(), "a refused run must not create its reports folder"


def test_unknown_gpu_profile_is_refused_and_the_profiles_are_listed(run_main):
    code, err, reports = run_main(GPU="nosuch")
    assert_refused(code, err, reports)
    assert "nosuch" in err
    for name in ("h100", "h200", "a100", "cpu"):
        assert name in err


@pytest.mark.parametrize("gpu", ["h100;rm", "../x", "H100", "h100 x", "$(id)"])
def test_gpu_name_outside_the_allowed_characters_is_refused(run_main, gpu):
    code, err, reports = run_main(GPU=gpu)
    assert_refused(code, err, reports)
    assert "a-z, 0-9" in err


@pytest.mark.parametrize("batches", ["16 x", "0", "-4", "1.5", "2,,0"])
def test_bad_batch_sizes_are_refused(run_main, batches):
    code, err, reports = run_main(BATCHES=batches)
    assert_refused(code, err, reports)
    assert "batch size" in err


def test_default_profile_name_is_not_a_gpu_profile(run_main):
    code, err, reports = run_main(GPU="default")
    assert_refused(code, err, reports)


def test_gpu_profile_for_another_backend_is_refused_on_this_cpu_machine(run_main):
    code, err, reports = run_main(GPU="h100")  # captures the environment in a child: ~3 s
    assert_refused(code, err, reports)
    assert "cuda" in err and "cpu" in err


def test_bad_input_through_the_real_command_line(tmp_path):
    reports = tmp_path / "reports"
    proc = run_cli("report", timeout=120, GPU="h100;rm", REPORTS=reports)
    assert proc.returncode == 2, describe_proc(proc)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), describe_proc(proc)
    assert proc.stdout == ""
    assert not reports.exists()


def test_pdf_without_a_report_is_refused(monkeypatch, tmp_path, capsys):
    for k in CLI_ENV_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("REPORTS", str(tmp_path))
    assert cli.main(["pdf"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no report at") and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------- helpers of the report command


def test_choose_profile_without_gpu_uses_the_detected_device():
    assert pipeline.choose_profile(None, {"backend": "cpu", "name": "x86_64"}, False) == ("cpu", None)
    assert pipeline.choose_profile(None, {"backend": "cuda", "name": "NVIDIA H100 80GB HBM3"}, False) == ("h100", None)


def test_choose_profile_refuses_an_unmatched_device_without_gpu():
    with pytest.raises(config.UsageError, match="no profile matches"):
        pipeline.choose_profile(None, {"backend": "cuda", "name": "NVIDIA GeForce GTX 1080"}, False)


def test_choose_profile_needs_override_for_another_device_of_the_same_backend():
    h200 = {"backend": "cuda", "name": "NVIDIA H200"}
    with pytest.raises(config.UsageError, match="OVERRIDE=1"):
        pipeline.choose_profile("h100", h200, False)
    profile, note = pipeline.choose_profile("h100", h200, True)
    assert profile == "h100" and "override" in note and "NVIDIA H200" in note


def test_archive_previous_moves_a_report_under_archive(tmp_path):
    report_dir = tmp_path / "cpu"
    (report_dir / "results").mkdir(parents=True)
    (report_dir / "report.html").write_text("first")
    dest = report_folder.archive_previous(report_dir)
    assert not report_dir.exists()
    assert dest.parent == tmp_path / "archive" and dest.name.startswith("cpu-")
    assert (dest / "report.html").read_text() == "first"


def test_archive_previous_never_overwrites_an_earlier_archive(tmp_path):
    report_dir = tmp_path / "cpu"
    kept = []
    for text in ("first", "second"):
        report_dir.mkdir()
        (report_dir / "report.html").write_text(text)
        kept.append(report_folder.archive_previous(report_dir))
    assert kept[0] != kept[1]
    assert [(d / "report.html").read_text() for d in kept] == ["first", "second"]


def test_archive_previous_ignores_a_missing_or_empty_folder(tmp_path):
    assert report_folder.archive_previous(tmp_path / "cpu") is None
    (tmp_path / "cpu").mkdir()
    assert report_folder.archive_previous(tmp_path / "cpu") is None
    assert (tmp_path / "cpu").is_dir() and not (tmp_path / "archive").exists()


def test_every_chapter_has_its_own_text_and_every_view_it_names_exists():
    from lib.report import chapter_page

    texts = [chapters.CHAPTERS[k].text for k in chapters.CHAPTERS]
    assert all(p.parent == ROOT / "notebooks" / "chapters" and p.is_file() for p in texts)
    assert len(set(texts)) == len(texts) and set(chapters.CHAPTERS) == set(stages.ORDER) | set(stages.BEYOND_STAGES)
    for key in chapters.CHAPTERS:
        plan = chapter_page.plan(chapter_page.text_of(key))
        assert plan[0][0] == "md" and plan[0][1].startswith("### "), key  # the chapter opens with its heading
        assert all(all(a in stages.STAGES for a in p[2]) for p in plan if p[0] == "view"), key  # arguments are stages


# GPT-2's figures: its vocabulary, padded vocabulary, padding rows, width and global batch
GPT2_FIGURES = ("50257", "50304", "47 rows", "47 extra", "768", "3072", "524,288", "524288")


def test_stage_texts_and_chapters_name_gpt2s_figures_only_as_gpt2s():
    """The CPU default's tiny model (vocabulary 1000 padded to 1024, a 512-token global batch: params/cpu.yaml) was
    described with GPT-2's figures ('GPTConfig(vocab_size=50304)  # 47 rows that are never targets', 'the recommendation
    at GPT-2's 524,288-token batch'). A stage's lever and switch name no model's figures; a chapter names GPT-2's only
    in a clause that says they are GPT-2's."""
    import re

    for st in stages.STAGES.values():
        for text in (st.lever, st.switch):
            assert not any(f in text for f in GPT2_FIGURES), (st.key, text)
    for key, chapter in chapters.CHAPTERS.items():
        text = " ".join(chapter.text.read_text().split())
        for clause in re.split(r"(?<=[.;:])\s", text):
            named = [f for f in GPT2_FIGURES if f in clause]
            assert not named or "GPT-2" in clause, (key, named, clause)


def test_a_view_the_registry_lacks_is_an_error_that_lists_the_views():
    from lib.report import chapter_page

    with pytest.raises(ValueError, match=r"unknown view 'nonesuch' \(views: measured, losses"):
        chapter_page.plan("### T\n\n<!-- view: nonesuch -->\n")
    assert chapter_page.plan("### T\n\n<!-- view: versus compile fp8 -->\ntail") == [
        ("md", "### T"),
        ("view", "versus", ("compile", "fp8")),
        ("md", "tail"),
    ]


def test_a_missing_chapter_text_fails_when_the_registry_is_imported(monkeypatch, tmp_path):
    import importlib

    (tmp_path / "chapters").mkdir()
    for name in ("chapter.ipynb", "summary.ipynb", "compare.ipynb"):
        (tmp_path / name).write_text("{}")
    monkeypatch.setattr(paths, "NOTEBOOKS", tmp_path)
    with pytest.raises(ImportError, match="chapters/fp32.md"):
        importlib.reload(chapters)
    monkeypatch.undo()
    importlib.reload(chapters)


# ---------------------------------------------------------------- the Makefile


def _make(*args, **env):
    import subprocess

    from conftest import cli_env

    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(**env),
    )


def test_make_help_lists_every_target_of_the_makefile():
    import re

    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))  # corpus-long too
    out = _make("help").stdout
    listed = set(re.findall(r"^  make ([\w-]+)", out, re.M))
    assert targets and listed == targets, targets ^ listed
    assert "MEASURE_ONLY=1" in out and "STAGES=" in out and "MEASURE_FOR=" in out and "COMPILE_CACHE=" in out


@pytest.mark.parametrize(
    "var, value, message",
    [
        ("GPU", "nosuch", "unknown GPU profile 'nosuch'"),
        ("BATCHES", "2 x", "batch size 'x' is not a positive integer"),
        ("STAGES", "fp32 warp9", "unknown stage 'warp9'"),
        ("CHAPTERS", "batch_sweep warp9", "unknown chapter 'warp9'"),
        ("NNODES", "0", "NNODES '0' is not a positive integer"),
    ],
)
def test_a_bad_input_to_make_report_is_the_last_line_printed(var, value, message):
    if not any((ROOT / stamp).exists() for stamp in (".venv/.stamp", ".deps/.stamp")):
        pytest.skip("make checks inputs early once its environment exists (make test creates it first)")
    proc = _make("report", f"{var}={value}")
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert proc.returncode == 2 and message in lines[-1], describe_proc(proc)
    assert not any("run phase" in ln for ln in lines)


def test_a_profile_for_another_backend_is_refused_by_make_in_one_line():
    """`make report GPU=h100` on a machine without a CUDA device printed three lines (setup's data line, the
    refusal, make's 'Error 2'): the early check looks at the device where GPU= names a profile, and the refusal is
    all that is printed."""
    import torch

    if not any((ROOT / stamp).exists() for stamp in (".venv/.stamp", ".deps/.stamp")):
        pytest.skip("make checks inputs early once its environment exists (make test creates it first)")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    proc = _make("report", "GPU=h100")
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, describe_proc(proc)
    assert "profile 'h100' is for cuda devices" in lines[0] and "OVERRIDE" not in lines[0]


# ---------------------------------------------------------------- the DDP stage's nodes


@pytest.mark.parametrize(
    "inputs, message",
    [
        ({"NNODES": "0"}, "NNODES '0' is not a positive integer"),
        ({"NNODES": "two", "RDZV": "127.0.0.1:29500"}, "NNODES 'two' is not a positive integer"),
        ({"NNODES": "2", "NODE_RANK": "2", "RDZV": "127.0.0.1:29500"}, "NODE_RANK '2' is out of range for NNODES=2"),
        ({"NNODES": "2", "NODE_RANK": "-1", "RDZV": "127.0.0.1:29500"}, "NODE_RANK '-1' is out of range for NNODES=2"),
        ({"NODE_RANK": "1"}, "NODE_RANK '1' is out of range for NNODES=1"),
        ({"NNODES": "2", "RDZV": "127.0.0.1"}, "RDZV '127.0.0.1' is not host:port"),
        ({"NNODES": "2", "RDZV": "127.0.0.1:29500;id"}, "is not host:port"),
        ({"NNODES": "2", "RDZV": "127.0.0.1:70000"}, "port 70000 is out of range 1..65535"),
        ({"NNODES": "2", "RDZV": "127.0.0.1:0"}, "port 0 is out of range 1..65535"),
        ({"NNODES": "2", "NODE_RANK": "1"}, "NNODES=2 needs RDZV=host:port"),
        ({"RDZV": "127.0.0.1:29500"}, "is given but NNODES is 1"),
    ],
)
def test_bad_node_inputs_are_refused_by_the_early_check(tmp_path, capsys, inputs, message):
    """`make report` writes its inputs to a file of NAME=value lines for `python -m lib.cli check`."""
    lines = {"GPU": "", "BATCHES": "", "STAGES": "", "REPORTS": str(tmp_path / "reports"), **inputs}
    path = tmp_path / "inputs"
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    assert cli.main(["check", str(path)]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("error: ") and message in out[0], out


def test_node_inputs_become_the_ddp_launch(tmp_path, capsys):
    path = tmp_path / "inputs"
    path.write_text(f"REPORTS={tmp_path / 'reports'}\nNNODES=2\nNODE_RANK=1\nRDZV=127.0.0.1:29500\n")
    assert cli.main(["check", str(path)]) == 0 and capsys.readouterr().out == ""
    assert cli_args.check_launch("2", "1", "127.0.0.1:29500") == {
        "nnodes": 2,
        "node_rank": 1,
        "rdzv": "127.0.0.1:29500",
    }
    assert cli_args.check_launch() == cli_args.check_launch("", "", "") == {"nnodes": 1, "node_rank": 0, "rdzv": None}
    # the existing callers of check_inputs keep working; the new values are keyword arguments
    assert pipeline.check_inputs(None, "2", None, str(tmp_path / "reports")) == ([2], None)
    with pytest.raises(config.UsageError, match="NNODES=3 needs RDZV"):
        pipeline.check_inputs(None, None, None, str(tmp_path / "reports"), nnodes="3", node_rank="2")


def test_bad_node_inputs_stop_make_report_before_measuring(run_main, monkeypatch):
    for k in ("NNODES", "NODE_RANK", "RDZV"):
        monkeypatch.delenv(k, raising=False)
    code, err, reports = run_main(NNODES="2", NODE_RANK="1")
    assert_refused(code, err, reports)
    assert "NNODES=2 needs RDZV=host:port" in err
