"""Remove from a wheelhouse the projects a host already has.

usage: python tools/prune_wheelhouse.py WHEELHOUSE FREEZE_FILE
FREEZE_FILE lists one project per line ('name' or 'name==version', as `pip freeze` prints);
names are compared after PEP 503 normalisation. PyTorch is never in a wheelhouse anyway."""

import re
import sys
from pathlib import Path


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(wheelhouse: str, freeze: str) -> None:
    have = {
        normalise(re.split(r"[=<>~ @;]", line.strip(), maxsplit=1)[0])
        for line in Path(freeze).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    kept, removed = [], []
    for whl in sorted(Path(wheelhouse).glob("*.whl")):
        (removed if normalise(whl.name.split("-")[0]) in have else kept).append(whl)
    for whl in removed:
        whl.unlink()
    print(f"wheelhouse: left out {len(removed)} wheel(s) the host has; kept {len(kept)}")


if __name__ == "__main__":
    main(*sys.argv[1:])
