"""lib/core/long_corpus.py: split, order, hashes and errors of the long corpus, built from small fake
packages (the fetch is replaced; nothing is downloaded)."""

from __future__ import annotations

import gzip
import io
import json
import lzma

import numpy as np
import pytest

from lib.core import data
from lib.core import long_corpus as lc

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
FAKE = (
    lc.Source("fake-rst", "1", "doc", "**/*.rst.gz", "text", "translations"),
    lc.Source("fake-pod", "1", "pod", "*.pod", "pod"),
    lc.Source("fake-dict", "1", "dictd", "fake.dict.dz", "dict"),
)
DOCS_PER_SOURCE = 60


def _b64(n: int) -> str:
    out = ""
    while True:
        out, n = B64[n % 64] + out, n // 64
        if not n:
            return out


def _write_fake(source: lc.Source, root):
    """A package's unpacked files: every document carries a marker word "<kind>doc<n>"."""
    base = root / source.root
    base.mkdir(parents=True)
    if source.kind == "text":
        (base / "translations").mkdir()
        (base / "translations" / "zh.rst.gz").write_bytes(gzip.compress("textdoc999 not English".encode()))
        for n in range(DOCS_PER_SOURCE):
            text = f"Title {n}\n=======\n\n.. note::\n   :maxdepth: 2\n\nSee :ref:`textdoc{n} <target>` here.\n"
            (base / f"d{n:03}.rst.gz").write_bytes(gzip.compress(text.encode()))
    elif source.kind == "pod":
        for n in range(DOCS_PER_SOURCE):
            (base / f"p{n:03}.pod").write_text(f"=head1 NAME\n\nC<poddoc{n}> is B<bold>.\n\n=cut\n")
    else:
        body, index = b"", ["00-database-info\tA\tB"]
        for n in range(DOCS_PER_SOURCE):
            entry = f"Word{n} \\Word\\ n.\n   1. dictdoc{n}, a word.\n   [1913 Webster]\n\n".encode()
            index.append(f"word{n}\t{_b64(len(body))}\t{_b64(len(entry))}")
            body += entry
        (base / "fake.dict.dz").write_bytes(gzip.compress(body))
        (base / "fake.index").write_text("\n".join(sorted(index)) + "\n")
    return root


@pytest.fixture
def fake_build(tmp_path, monkeypatch):
    """build() over the fake packages into a temporary data/long/; returns a function running it."""
    monkeypatch.setattr(lc, "SOURCES", FAKE)
    monkeypatch.setattr(lc, "DEB_SHA256", {s.package: "0" * 64 for s in FAKE})
    monkeypatch.setattr(lc, "LONG_DIR", tmp_path / "long")
    monkeypatch.setattr(lc, "fetch", lambda source, tmp: _write_fake(source, tmp / source.package))
    return lambda: lc.build(min_train=0, min_held_out=0)


def _documents(tokens: np.ndarray) -> list[str]:
    enc = data.encoding()
    cuts = np.flatnonzero(tokens == data.EOT)
    return [enc.decode(d.tolist()) for d in np.split(tokens, cuts + 1)[:-1]]


def _markers(docs: list[str]) -> set[str]:
    import re

    return {m for d in docs for m in re.findall(r"\b(?:text|pod|dict)doc\d+\b", d)}


def test_held_out_documents_are_disjoint_from_training_documents(fake_build):
    manifest = fake_build()
    train, held = lc.load()
    train_docs, held_docs = _documents(train), _documents(held)
    assert train.dtype == np.uint16 and held.size > 0
    assert len(train_docs) + len(held_docs) == 3 * DOCS_PER_SOURCE  # each document once, whole
    assert not _markers(train_docs) & _markers(held_docs)
    assert len(_markers(train_docs) | _markers(held_docs)) == 3 * DOCS_PER_SOURCE
    assert manifest["train_tokens"] == train.size and manifest["held_out_tokens"] == held.size
    assert sum(s["held_out_tokens"] for s in manifest["sources"]) == held.size


def test_cleaning_drops_markup_lines_and_translations(fake_build):
    fake_build()
    text = "".join(_documents(np.concatenate(lc.load())))
    assert "textdoc999" not in text  # translations/ is left out
    assert "===" not in text and ".. note::" not in text and ":maxdepth:" not in text
    assert "`textdoc1`" in text and "<target>" not in text  # a role keeps its text
    assert "=head1" not in text and "C<" not in text and "poddoc1 is bold" in text
    assert "[1913 Webster]" not in text and "00-database" not in text
    assert "\n1. dictdoc1, a word." in text  # the dictionary's indentation is dropped


def test_training_interleaves_every_source_throughout(fake_build):
    fake_build()
    train, _ = lc.load()
    docs = _documents(train)
    for quarter in np.array_split(np.arange(len(docs)), 4):
        kinds = {m.split("doc")[0] for m in _markers([docs[i] for i in quarter])}
        assert kinds == {"text", "pod", "dict"}


def test_build_is_deterministic(fake_build):
    first = fake_build()["tokens_sha256"]
    assert fake_build()["tokens_sha256"] == first


def test_a_tampered_token_file_is_refused(fake_build):
    fake_build()
    path = lc.LONG_DIR / "train.npy.xz"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(data.DataError, match=r"train\.npy\.xz is missing or differs from its sha256.*make corpus-long"):
        lc.load()


def test_tokens_that_differ_from_the_manifest_are_refused(fake_build):
    """A re-written file whose own hash was updated in the manifest still fails the array's hash."""
    fake_build()
    path, manifest_path = lc.LONG_DIR / "held_out.npy.xz", lc.LONG_DIR / "manifest.json"
    train, held = lc.load()
    buf = io.BytesIO()
    np.save(buf, held[::-1].copy())
    path.write_bytes(lzma.compress(buf.getvalue()))
    manifest = json.loads(manifest_path.read_text())
    manifest["files_sha256"]["held_out.npy.xz"] = data.sha256_file(path)
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(data.DataError, match="the tokens in .*held_out.npy.xz differ from their sha256"):
        lc.load()


def test_missing_corpus_names_the_make_target(tmp_path, monkeypatch):
    monkeypatch.setattr(lc, "LONG_DIR", tmp_path / "long")
    with pytest.raises(data.DataError, match="long corpus is missing.*make corpus-long"):
        lc.load()


def test_a_corpus_below_the_minimum_is_refused(fake_build):
    with pytest.raises(data.DataError, match="long corpus too small"):
        lc.build()
    assert not (lc.LONG_DIR / "manifest.json").exists()


def test_fetch_without_apt_get_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(lc.shutil, "which", lambda name: None)
    with pytest.raises(data.DataError, match="apt-get and dpkg-deb are not available.*make corpus-long"):
        lc.fetch(lc.SOURCES[0], tmp_path)


def test_every_pinned_source_has_a_sha256():
    assert {s.package for s in lc.SOURCES} == set(lc.DEB_SHA256)
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in lc.DEB_SHA256.values())
