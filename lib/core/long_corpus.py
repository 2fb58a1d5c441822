"""The long quality test's corpus: about 27M GPT-2 tokens of English that the test does not repeat.

GPU hosts are offline and this project's machines reach only package registries, so the text comes
from Debian packages fetched by exact version with `apt-get download`, checked against the .deb's
pinned sha256 and unpacked with `dpkg-deb -x` into a temporary folder: the Linux kernel's, Python's,
Perl's and git's documentation (rst, pod, asciidoc; the kernel's translations left out) and four
dictd dictionaries (GCIDE, i.e. Webster 1913 and WordNet; FOLDOC; the Jargon File; Bierce's Devil's
Dictionary). Technical and dictionary English: the prose packages a few look-ups found were far
smaller (debian-handbook's English HTML is about 0.3M tokens). Cleaning is light and line-based
(see `clean`). A document (a file; a dictionary headword's entries) is held out when the sha256 of its
id falls in the lowest HELD_OUT of its range; training documents follow in that hash's order, so every
stretch of training mixes all sources. Each document ends with <|endoftext|>.
`build()` (`make corpus-long`) writes data/long/: the token arrays as xz-compressed uint16 .npy and
manifest.json (sources, hashes, counts); `load()` checks them and returns (train, held_out).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import json
import lzma
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lib.core import data
from lib.core.data import EOT, DataError, sha256_file

LONG_DIR = data.DATA_DIR / "long"
HELD_OUT = 0.05  # of the documents (by hash): about 1.4M tokens
MIN_TRAIN, MIN_HELD_OUT = 25_000_000, 1_000_000
# What the pinned packages give (their manifest's train_tokens, tests/test_long_corpus.py holds the two together): a
# report sizes a long test it proposes before the corpus is fetched
PINNED_TRAIN_TOKENS = 25_699_372
FILES = ("train.npy.xz", "held_out.npy.xz")
MAKE_HINT = "run `make corpus-long` (a machine with apt-get and Debian's registry; then copy data/long/ here)"


@dataclass(frozen=True)
class Source:
    package: str
    version: str
    root: str  # the folder inside the package
    globs: str  # the files taken under root, space-separated
    kind: str  # how they are read and cleaned: "text" (rst, asciidoc, plain), "pod" or "dict" (dictd)
    exclude: str = ""  # a folder under root left out


DEB_SHA256 = {
    "linux-doc-6.1": "0d843674607703b9ef8c1db5e715c38ed52ff23574feabfe0d961d552126859f",
    "python3.11-doc": "50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b",
    "perl-doc": "f4269cff4576d6f02a6756df842988e58451c7e945b08517dd235531b24e48f8",
    "git-doc": "3c89668a11053a6bafade3de1f611f4613db31e082af63f43d8c5b69ad8795ec",
    "dict-gcide": "7b0af5cfde3cbdef5e9d6e78f92ec335ced7c2790f37a40f49bebc6f7347ac0f",
    "dict-foldoc": "745cbedb55c2da609cc88ee0284e9d11a67a11ae3709daf7bad0e895ac3294c3",
    "dict-jargon": "405f8168d7994ed2cb71407bb95493daec2e9aa66fc0461dafa74a9d6728a8c1",
    "dict-devil": "6a535684def2a1f70cd42da16d12d43f0e9dc3e54e4a329178eebab3170e3154",
}
SOURCES = (
    Source(
        "linux-doc-6.1",
        "6.1.176-1",
        "usr/share/doc/linux-doc-6.1/Documentation",
        "**/*.rst.gz **/*.txt.gz",
        "text",
        "translations",
    ),
    Source("python3.11-doc", "3.11.2-6+deb12u8", "usr/share/doc/python3.11/html/_sources", "**/*.rst.txt", "text"),
    Source("perl-doc", "5.36.0-7+deb12u4", "usr/share/perl/5.36.0/pod", "*.pod", "pod"),
    Source("git-doc", "1:2.39.5-0+deb12u3", "usr/share/doc/git-doc", "*.txt", "text"),
    Source("dict-gcide", "0.48.5+nmu2", "usr/share/dictd", "gcide.dict.dz", "dict"),
    Source("dict-foldoc", "20230119-1", "usr/share/dictd", "foldoc.dict.dz", "dict"),
    Source("dict-jargon", "4.4.7-3.1", "usr/share/dictd", "jargon.dict.dz", "dict"),
    Source("dict-devil", "1.0-13.1", "usr/share/dictd", "devil.dict.dz", "dict"),
)

# a line of markup only: an rst directive or comment (".. x::"), a field or option (":maxdepth: 2"), a line of
# punctuation (section underlines, table borders, asciidoc delimiters), a bracketed tag ("[verse]", "[1913 Webster]")
MARKUP_LINE = re.compile(r"\s*(\.\. |:[\w -]+:(\s|$)|[=\-~^\"'`#*+_:.|]+(\s+[=\-~^\"'`#*+_:.|]+)*\s*$|\[[^\]]*\]\s*$)")
ROLE = re.compile(r":[\w:.+-]+:`([^`]*?)(?:\s*<[^`>]*>)?`")  # :ref:`text <target>` -> `text`
POD_CODE = re.compile(r"[BCEFILSXZ]<(?:<+\s+(.*?)\s+>+|([^<>]*))>")  # C<x>, C<< x >> -> x; L<text|link> -> text|link
B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def fetch(source: Source, tmp: Path) -> Path:
    """The package's files, unpacked under tmp: downloaded by exact version, checked by sha256."""
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise DataError(
            f"apt-get and dpkg-deb are not available here, so {source.package} cannot be fetched: {MAKE_HINT}"
        )
    spec = f"{source.package}={source.version}"
    proc = subprocess.run(["apt-get", "download", spec], cwd=tmp, capture_output=True, text=True)
    debs = list(tmp.glob(f"{source.package}_*.deb"))
    if proc.returncode or len(debs) != 1:
        raise DataError(
            f"apt-get could not download {spec} (run `apt-get update` first; Debian drops superseded versions, "
            f"so a vanished pin needs a new version and sha256 in {__name__}): {proc.stderr.strip()[-300:]}"
        )
    digest = sha256_file(debs[0])
    if digest != DEB_SHA256[source.package]:
        raise DataError(f"{debs[0].name} has sha256 {digest}, expected {DEB_SHA256[source.package]}")
    out = tmp / source.package
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(out)], check=True)
    debs[0].unlink()
    return out


def clean(text: str, kind: str) -> str:
    """Light, line-based cleaning: markup-only lines go, inline markup keeps its text."""
    if kind == "pod":  # "=head1 NAME" and "=item x" keep their text, every other command line goes
        text = re.sub(r"(?m)^=(?:head\d|item)\s*", "", text)
        text = re.sub(r"(?m)^=\w.*$", "", text)
        for _ in range(3):  # nested codes, innermost first
            text = POD_CODE.sub(lambda m: m.group(1) or m.group(2), text)
    if kind == "dict":  # indentation and GCIDE's source tags go
        lines = (ln.strip() for ln in text.splitlines() if not MARKUP_LINE.match(ln))
    else:
        lines = (ROLE.sub(r"`\1`", ln.rstrip()) for ln in text.splitlines() if not MARKUP_LINE.match(ln))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _read(path: Path) -> bytes:
    return (gzip.open if path.suffix in (".gz", ".dz") else open)(path, "rb").read()


def _dict_entries(path: Path) -> list[tuple[str, str]]:
    """(headword, text) of a dictd database's entries, from its index (base64 offset and length)."""
    raw, entries = _read(path), {}
    for line in path.with_name(path.name.replace(".dict.dz", ".index")).read_text("utf-8").splitlines():
        name, off, size = line.split("\t")[:3]
        if not name.startswith("00"):  # the database's own header entries
            o, n = (sum(B64[c] * 64**i for i, c in enumerate(reversed(v))) for v in (off, size))
            entries.setdefault(o, (name, raw[o : o + n].decode("utf-8", "replace")))
    return [entries[o] for o in sorted(entries)]


def documents(source: Source, unpacked: Path) -> list[tuple[str, str]]:
    """(document id, cleaned text) for every document the source contributes: a file; in a dictionary,
    the consecutive entries of one headword."""
    root = unpacked / source.root
    paths = sorted({p for g in source.globs.split() for p in root.glob(g)})
    paths = [p for p in paths if source.exclude not in p.relative_to(root).parts]
    if source.kind != "dict":
        docs = [(str(p.relative_to(root)), clean(_read(p).decode("utf-8", "replace"), source.kind)) for p in paths]
    else:
        entries = [e for p in paths for e in _dict_entries(p)]
        groups = itertools.groupby(entries, key=lambda e: e[0].casefold())
        docs = [(f"{head}#{i}", clean("\n\n".join(t for _, t in g), "dict")) for i, (head, g) in enumerate(groups)]
    return [(f"{source.package}:{i}", t) for i, t in docs if t]


def _rank(doc_id: str) -> float:
    """Where the document falls in [0, 1): its held-out draw and its place in the training order."""
    return int(hashlib.sha256(doc_id.encode()).hexdigest()[:16], 16) / 2**64


def _save(path: Path, tokens: np.ndarray) -> str:
    """Write tokens as an xz-compressed .npy (about 0.75 bytes a token instead of 2); returns its sha256."""
    buf = io.BytesIO()
    np.save(buf, tokens)
    data._atomic_write_bytes(path, lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    return sha256_file(path)


def build(min_train: int = MIN_TRAIN, min_held_out: int = MIN_HELD_OUT) -> dict:
    """Fetch, clean, split and tokenize every source into LONG_DIR; returns the manifest."""
    start, enc = time.monotonic(), data.encoding()
    docs = []  # (rank, package, text)
    with tempfile.TemporaryDirectory(prefix="long_corpus.") as tmp:
        for src in SOURCES:
            docs += [(_rank(i), src.package, t) for i, t in documents(src, fetch(src, Path(tmp)))]
    docs.sort()
    parts = {"train": [], "held_out": []}
    counts = {(s.package, part): [0, 0] for s in SOURCES for part in parts}
    for b in range(0, len(docs), 4096):  # in batches: Python lists of every token would take gigabytes
        batch = docs[b : b + 4096]
        for (rank, package, _), toks in zip(batch, enc.encode_ordinary_batch([t for *_, t in batch], num_threads=8)):
            part = "held_out" if rank < HELD_OUT else "train"
            parts[part].append(np.asarray(toks + [EOT], dtype=np.uint16))
            counts[package, part][0] += 1
            counts[package, part][1] += len(toks) + 1
    arrays = {k: np.concatenate(v or [np.zeros(0, np.uint16)]) for k, v in parts.items()}
    if arrays["train"].size < min_train or arrays["held_out"].size < min_held_out:
        raise DataError(
            f"long corpus too small: {arrays['train'].size:,} training tokens (at least {min_train:,} needed) "
            f"and {arrays['held_out'].size:,} held-out (at least {min_held_out:,})"
        )
    LONG_DIR.mkdir(parents=True, exist_ok=True)
    files = {f: _save(LONG_DIR / f, arrays[f.split(".")[0]]) for f in FILES}
    manifest = {
        "corpus": "English technical and dictionary text from pinned Debian packages (lib.core.long_corpus)",
        "tokenizer_ranks_sha256": data.GPT2_RANKS_SHA256,
        "sources": [
            {**asdict(s), "deb_sha256": DEB_SHA256[s.package]}
            | {f"{p}_{k}": counts[s.package, p][j] for p in parts for j, k in enumerate(("documents", "tokens"))}
            for s in SOURCES
        ],
        "split": f"by document: held out where sha256(id) falls in the lowest {HELD_OUT} of its range; "
        "training in sha256 order; <|endoftext|> after each document",
        "train_tokens": int(arrays["train"].size),
        "held_out_tokens": int(arrays["held_out"].size),
        "tokens_sha256": {k: hashlib.sha256(a.tobytes()).hexdigest() for k, a in arrays.items()},
        "files_sha256": files,
        "build_seconds": round(time.monotonic() - start, 1),
    }
    data._atomic_write_bytes(LONG_DIR / "manifest.json", json.dumps(manifest, indent=2).encode())
    return manifest


def load() -> tuple[np.ndarray, np.ndarray]:
    """(training tokens, held-out tokens), after checking every file and array against the manifest."""
    path = LONG_DIR / "manifest.json"
    _, (files, arrays) = data.read_manifest(
        path,
        ("files_sha256", "tokens_sha256"),
        f"the long corpus is missing ({path}): {MAKE_HINT}",
        f"{path} is damaged: delete data/long/ and {MAKE_HINT}",
    )
    out = []
    for f in FILES:
        p = LONG_DIR / f
        if not p.exists() or sha256_file(p) != files[f]:
            raise DataError(f"{p} is missing or differs from its sha256 in {path}: delete data/long/ and {MAKE_HINT}")
        tokens = np.load(io.BytesIO(lzma.decompress(p.read_bytes())))
        if hashlib.sha256(tokens.tobytes()).hexdigest() != arrays[f.split(".")[0]]:
            raise DataError(f"the tokens in {p} differ from their sha256 in {path}: delete data/long/ and {MAKE_HINT}")
        out.append(tokens)
    return out[0], out[1]


def part(params, held_out: bool = False) -> np.ndarray:
    """The training (or held-out) tokens in the vocabulary of `params`' model (data.shrink_vocab: the CPU default's
    tiny one keeps the most frequent tokens)."""
    return data.shrink_vocab(load()[1 if held_out else 0], params.model.vocab_size)


if __name__ == "__main__":
    try:
        m = build()
    except DataError as e:
        sys.exit(f"error: {e}")
    print(f"long corpus ready in {LONG_DIR}: {m['train_tokens']:,} training, {m['held_out_tokens']:,} held-out tokens")
