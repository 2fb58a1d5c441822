"""lib/core/config.py: parameters as data, validated, every bad input a one-line ConfigError."""

from __future__ import annotations

import os
from dataclasses import asdict

import pytest
import yaml

from lib.core import cli_args, config

# ---------------------------------------------------------------- parse_batches


@pytest.mark.parametrize(
    "text, expected",
    [
        ("16", [16]),
        ("16 32 64", [16, 32, 64]),
        ("16,32", [16, 32]),
        (" 16, 32\t64 ", [16, 32, 64]),
    ],
)
def test_parse_batches_accepts_spaces_and_commas(text, expected):
    assert cli_args.parse_batches(text) == expected


@pytest.mark.parametrize("text", ["16 x", "0", "-4", "1.5", "0x10", "1e3", "+4"])
def test_parse_batches_refuses_anything_but_positive_integers(text):
    with pytest.raises(config.ConfigError, match="not a positive integer"):
        cli_args.parse_batches(text)


@pytest.mark.parametrize("text", ["", "  ", ", ,"])
def test_parse_batches_refuses_empty_text(text):
    with pytest.raises(config.ConfigError, match="empty"):
        cli_args.parse_batches(text)


# ---------------------------------------------------------------- check_name


@pytest.mark.parametrize("name", ["cpu", "h100", "h100-pcie", "my_gpu2"])
def test_check_name_accepts_lowercase_digits_dash_underscore(name):
    assert config.check_name(name) == name


@pytest.mark.parametrize("name", ["h100;rm", "../x", "H100", "a b", "", "x/y", "é", None, 5])
def test_check_name_refuses_other_characters_and_lists_profiles(name):
    with pytest.raises(config.ConfigError) as e:
        config.check_name(name)
    assert "a-z, 0-9" in str(e.value) and "h100" in str(e.value)


def test_check_name_refuses_a_trailing_newline():
    with pytest.raises(config.ConfigError):
        config.check_name("cpu\n")


def test_profiles_lists_device_files_but_not_default():
    names = config.profiles()
    assert {"cpu", "h100", "h100-pcie", "h200", "a100"} <= set(names)
    assert "default" not in names
    assert names == sorted(names)


# ---------------------------------------------------------------- load


def test_load_cpu_overlays_the_profile_on_default():
    default = yaml.safe_load((config.PARAMS_DIR / "default.yaml").read_text())
    cpu = yaml.safe_load((config.PARAMS_DIR / "cpu.yaml").read_text())
    p = config.load("cpu")
    assert p.name == "cpu" and p.override is None
    assert p.backend == "cpu"
    model = {**default["model"], **cpu["model"]}  # every model key set by cpu.yaml wins
    preset = config.presets()[model.pop("preset")]  # ... and its preset gives the shape
    assert asdict(p.model) == {**model, **{k: preset[k] for k in config.SHAPE}} and p.model_preset == "tiny"
    assert asdict(p.run) == {**default["run"], **cpu["run"]}  # the keys cpu.yaml leaves out come from default
    assert p.run.seed == default["run"]["seed"]
    assert p.stages == [k for k in default["stages"] if k not in default["full_depth"]["stages"]]  # default depth


def test_load_with_batch_sizes_replaces_the_profile_batches():
    assert config.load("cpu", [8, 16]).run.batch_sizes == [8, 16]


def test_load_keeps_the_override_note():
    assert config.load("cpu", None, "a note").override == "a note"


def test_load_does_not_share_state_between_calls():
    config.load("cpu").run.batch_sizes.append(999)
    assert 999 not in config.load("cpu").run.batch_sizes


def test_load_unknown_profile_lists_the_profiles():
    with pytest.raises(config.ConfigError, match=r"unknown GPU profile 'nosuch'.*h100"):
        config.load("nosuch")


def test_every_shipped_profile_loads():
    for name in config.profiles():
        assert config.load(name).name == name


def append_yaml(path, text):
    path.write_text(path.read_text() + "\n" + text + "\n")


def test_unknown_top_level_key_is_an_error_naming_it(tmp_params_dir):
    append_yaml(tmp_params_dir / "cpu.yaml", "colour: blue")
    with pytest.raises(config.ConfigError, match=r"params/cpu\.yaml: unknown key 'colour'"):
        config.load("cpu")


def test_unknown_nested_key_is_an_error_naming_it(tmp_params_dir):
    (tmp_params_dir / "cpu.yaml").write_text(
        (tmp_params_dir / "cpu.yaml").read_text().replace("  timed_steps: 10", "  timed_steps: 10\n  timed_stpes: 20")
    )
    with pytest.raises(config.ConfigError, match=r"run: unknown key 'timed_stpes'"):
        config.load("cpu")


def test_unknown_key_in_default_yaml_is_an_error(tmp_params_dir):
    append_yaml(tmp_params_dir / "default.yaml", "extra: 1")
    with pytest.raises(config.ConfigError, match=r"default\.yaml: unknown key 'extra'"):
        config.load("cpu")


def test_malformed_yaml_is_an_error_naming_the_file(tmp_params_dir):
    append_yaml(tmp_params_dir / "cpu.yaml", "run: [unclosed")
    with pytest.raises(config.ConfigError, match=r"params/cpu\.yaml: malformed YAML") as e:
        config.load("cpu")
    assert "\n" not in str(e.value)


def test_yaml_that_is_not_a_mapping_is_an_error(tmp_params_dir):
    (tmp_params_dir / "cpu.yaml").write_text("- a\n- b\n")
    with pytest.raises(config.ConfigError, match="mapping"):
        config.load("cpu")


@pytest.mark.parametrize(
    "text, key",
    [
        ("run:\n  seed: '1'", "seed"),
        ("run:\n  batch_sizes: 4", "batch_sizes"),
        ("model:\n  block_size: 2.5", "block_size"),
        ("model:\n  vocab_size: true", "vocab_size"),
        ("run:\n  learning_rate: fast", "learning_rate"),
        ("stages: fp32", "stages"),
        ("run: 3", "run"),
    ],
)
def test_value_of_the_wrong_type_is_an_error_naming_the_key(tmp_params_dir, text, key):
    (tmp_params_dir / "mine.yaml").write_text("backend: cpu\n" + text + "\n")
    with pytest.raises(config.ConfigError, match=f"'{key}' must be"):
        config.load("mine")


def test_an_integer_is_accepted_where_a_float_is_expected(tmp_params_dir):
    (tmp_params_dir / "mine.yaml").write_text("backend: cpu\nrun:\n  learning_rate: 1\n")
    assert config.load("mine").run.learning_rate == 1


@pytest.mark.parametrize("text", ["stages: null", "model:\n  block_size: null"])
def test_null_value_is_a_config_error(tmp_params_dir, text):
    (tmp_params_dir / "mine.yaml").write_text("backend: cpu\n" + text + "\n")
    with pytest.raises(config.ConfigError):
        config.load("mine")


# ---------------------------------------------------------------- validate


def test_timed_steps_below_the_minimum_is_an_error(cpu_params):
    cpu_params.run.timed_steps = config.MIN_TIMED_STEPS - 1
    with pytest.raises(config.ConfigError, match="timed_steps"):
        config.validate(cpu_params)


def test_timed_steps_at_the_minimum_is_accepted(cpu_params):
    cpu_params.run.timed_steps = config.MIN_TIMED_STEPS
    config.validate(cpu_params)


def test_seq_len_longer_than_block_size_is_an_error(cpu_params):
    cpu_params.run.seq_len = cpu_params.model.block_size + 1
    with pytest.raises(config.ConfigError, match="exceeds model.block_size"):
        config.validate(cpu_params)


def test_n_embd_not_divisible_by_n_head_is_an_error(cpu_params):
    cpu_params.model.n_head = 3
    with pytest.raises(config.ConfigError, match="not divisible"):
        config.validate(cpu_params)


def test_padded_vocab_smaller_than_vocab_is_an_error(cpu_params):
    cpu_params.model.padded_vocab_size = cpu_params.model.vocab_size - 1
    with pytest.raises(config.ConfigError, match="padded_vocab_size"):
        config.validate(cpu_params)


@pytest.mark.parametrize("batches", [[], [0], [2, -1], ["2"], [True]])
def test_bad_batch_size_lists_are_errors(cpu_params, batches):
    cpu_params.run.batch_sizes = batches
    with pytest.raises(config.ConfigError, match="batch"):
        config.validate(cpu_params)


def test_unknown_stage_is_an_error(cpu_params):
    cpu_params.stages = ["fp32", "fp9"]
    with pytest.raises(config.ConfigError, match="unknown stage 'fp9'"):
        config.validate(cpu_params)


def test_unknown_backend_is_an_error(cpu_params):
    cpu_params.backend = "tpu"
    with pytest.raises(config.ConfigError, match="backend"):
        config.validate(cpu_params)


def test_missing_run_key_is_an_error(tmp_params_dir):
    default = tmp_params_dir / "default.yaml"
    default.write_text(default.read_text().replace("  seed: 1337", ""))
    (tmp_params_dir / "mine.yaml").write_text("backend: cpu\n")
    with pytest.raises(config.ConfigError, match=r"params/mine\.yaml: run is missing seed"):
        config.load("mine")


# ---------------------------------------------------------------- match_profile


@pytest.mark.parametrize(
    "device, backend, expected",
    [
        ("NVIDIA H100 80GB HBM3", "cuda", "h100"),
        ("NVIDIA H100 PCIe", "cuda", "h100-pcie"),
        ("NVIDIA H200", "cuda", "h200"),
        ("NVIDIA A100-SXM4-80GB", "cuda", "a100"),
        ("NVIDIA B200", "cuda", "b200"),
        ("AMD Instinct MI300X", "rocm", "mi300x"),
        ("NVIDIA GeForce RTX 4090", "cuda", None),
        ("Some CPU", "cpu", "cpu"),
        ("x86_64", "cpu", "cpu"),
    ],
)
def test_match_profile(device, backend, expected):
    assert config.match_profile(device, backend) == expected


def test_match_profile_requires_the_same_backend():
    assert config.match_profile("AMD Instinct MI300X", "cuda") is None
    assert config.match_profile("NVIDIA H100 80GB HBM3", "rocm") is None


def test_a_host_variant_is_matched_by_its_gpu_count_and_the_plain_profile_still_fits():
    """params/h200-x2.yaml (gpus: 2) is the profile of a host with two H200s, never of one with one;
    GPU=h200 still runs on the two-GPU host (its own folder), GPU=h200-x2 on one H200 needs OVERRIDE=1."""
    from lib.run import pipeline

    name = "NVIDIA H200"
    assert config.match_profile(name, "cuda", 2) == "h200-x2"
    assert config.match_profile(name, "cuda", 1) == config.match_profile(name, "cuda") == "h200"
    assert config.match_profile(name, "cuda", 4) == "h200-x4"  # its own variant (params/h200-x4.yaml)
    assert config.match_profile(name, "cuda", 8) == "h200-x8"  # params/h200-x8.yaml
    assert config.match_profile(name, "cuda", 16) == "h200"  # no sixteen-GPU variant: the plain profile
    two, one = {"backend": "cuda", "name": name, "count": 2}, {"backend": "cuda", "name": name, "count": 1}
    assert pipeline.choose_profile(None, two, False) == ("h200-x2", None)
    assert pipeline.choose_profile("h200", two, False) == ("h200", None)
    with pytest.raises(config.ConfigError, match="OVERRIDE=1"):
        pipeline.choose_profile("h200-x2", one, False)
    assert config.load("h200-x2").name == "h200-x2"


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("parity_seeds", 1, "parity_looks must be rising seed counts from at least 2 that end at parity_seeds"),
        ("parity_power", 1.0, "parity_confidence and parity_power must lie in"),
        ("parity_confidence", 0.0, "parity_confidence and parity_power must lie in"),
    ],
)
def test_the_parity_rule_refuses_values_it_cannot_decide_with(field, value, message):
    p = config.load("h100")
    setattr(p.evidence, field, value)
    with pytest.raises(config.ConfigError, match=message):
        config.validate(p)
    assert config.load("h100").evidence.parity_seeds == 8  # the GPU profiles' rule, untouched


def test_a_profile_s_family_is_read_from_its_file_once_until_the_file_changes(monkeypatch, tmp_path):
    """Every claim of every report asks every profile's family: a render parsed the params files 308 times, most of
    a decision's time (2-7 s a load on two cores). Each file is read once, and again only after it changes."""
    import shutil

    reads = []
    real = config._read
    monkeypatch.setattr(config, "_read", lambda path: reads.append(path.name) or real(path))
    config._family_of.cache_clear()
    names = config.profiles()
    for _ in range(3):
        assert config.profile_family("h100") == "hopper" and [config.profile_family(n) for n in names]
    assert len(reads) == len(names)
    folder = tmp_path / "params"
    shutil.copytree(config.PARAMS_DIR, folder)
    monkeypatch.setattr(config, "PARAMS_DIR", folder)
    monkeypatch.setattr(config, "ROOT", tmp_path)  # where its messages name a file from
    assert config.profile_family("h100") == "hopper"
    path = folder / "h100.yaml"
    path.write_text(path.read_text().replace("family: hopper", "family: ampere"))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    assert config.profile_family("h100") == "ampere"  # a changed file is read afresh
