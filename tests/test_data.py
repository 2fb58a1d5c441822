"""lib/core/data.py: the tokenizer, the token ids and the hash checks of the prepared files."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from lib.core import data

PREPARED = ("gpt2.tiktoken", "corpus.txt", "tokens.npy", "manifest.json")


@pytest.fixture
def data_copy(tmp_path, monkeypatch):
    """A copy of the prepared data that lib.core.data reads instead of data/."""
    dest = tmp_path / "data"
    dest.mkdir()
    for name in PREPARED:
        shutil.copy(data.DATA_DIR / name, dest / name)
    monkeypatch.setattr(data, "DATA_DIR", dest)
    return dest


def test_encoding_is_gpt2():
    enc = data.encoding()
    assert enc.encode("Hello world") == [15496, 995]
    assert enc.decode(enc.encode("To be, or not to be")) == "To be, or not to be"
    assert enc.encode("<|endoftext|>", allowed_special="all") == [data.EOT]


def test_verify_accepts_the_prepared_data():
    manifest = data.verify()
    assert manifest["tokens"] > 0 and manifest["ranks_sha256"] == data.GPT2_RANKS_SHA256


def test_load_tokens_full_vocabulary_is_the_saved_tokens():
    tokens = data.load_tokens()
    assert tokens.size == data.verify()["tokens"]
    assert int(tokens.max()) < data.EOT  # encode_ordinary never yields <|endoftext|>


def test_load_tokens_small_vocabulary_keeps_ids_below_it():
    full, small = data.load_tokens(), data.load_tokens(1000)
    assert small.shape == full.shape
    assert int(small.max()) < 1000
    assert int(small.max()) == 999  # the "every other token" id is used


def test_load_tokens_small_vocabulary_numbers_tokens_by_frequency():
    small = data.load_tokens(1000)
    counts = np.bincount(small, minlength=1000)[:999]
    assert all(counts[:-1] >= counts[1:])  # id 0 is the most frequent token, and so on
    full = np.asarray(data.load_tokens())
    most_frequent = int(np.argmax(np.bincount(full)))
    assert np.array_equal(small == 0, full == most_frequent)


def test_batches_are_shifted_windows_of_the_tokens():
    tokens = np.arange(100, dtype=np.uint16)
    (x0, y0), (x1, _) = list(data.batches(tokens, batch_size=2, seq_len=5, steps=2))
    assert x0.dtype == np.int64 and x0.shape == (2, 5)
    assert x0.tolist() == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert np.array_equal(y0, x0 + 1)
    assert x1[0, 0] == 10


def test_batches_wrap_around_the_corpus():
    tokens = np.arange(25, dtype=np.uint16)
    got = [x[0, 0] for x, _ in data.batches(tokens, batch_size=2, seq_len=5, steps=4)]
    assert got == [0, 10, 0, 10]  # a third window would need token 30


def test_batches_refuse_a_corpus_smaller_than_one_batch():
    with pytest.raises(data.DataError, match="one batch needs 11"):
        next(data.batches(np.arange(10, dtype=np.uint16), batch_size=2, seq_len=5, steps=1))


def test_verify_of_the_copy_passes(data_copy):
    assert data.verify()["tokens"] > 0


@pytest.mark.parametrize("name", ["tokens.npy", "corpus.txt", "gpt2.tiktoken"])
def test_verify_refuses_a_corrupted_file_and_names_it(data_copy, name):
    path = data_copy / name
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(data.DataError, match="corrupt") as e:
        data.verify()
    assert str(path) in str(e.value)


@pytest.mark.parametrize("name", ["tokens.npy", "corpus.txt", "gpt2.tiktoken"])
def test_verify_refuses_a_missing_file_and_names_it(data_copy, name):
    (data_copy / name).unlink()
    with pytest.raises(data.DataError, match="missing") as e:
        data.verify()
    assert name in str(e.value)


def test_verify_without_a_manifest_says_to_run_setup(data_copy):
    (data_copy / "manifest.json").unlink()
    with pytest.raises(data.DataError, match="make setup"):
        data.verify()


def test_verify_refuses_a_damaged_manifest(data_copy):
    (data_copy / "manifest.json").write_text("{not json")
    with pytest.raises(data.DataError):
        data.verify()


def test_encoding_refuses_corrupted_ranks(data_copy):
    with open(data_copy / "gpt2.tiktoken", "ab") as f:
        f.write(b"x")
    with pytest.raises(data.DataError, match="sha256"):
        data.encoding()
