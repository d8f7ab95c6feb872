"""Write an offline language-modeling corpus to carry to a machine without network access.

    python experiments/lm/make_corpus.py                  # -> data/lm_docs/ (one .txt per source)
    hyla train --preset lm_gpu_docs ... --text.corpus data/lm_docs

The text is documentation already on this machine: Python's own (`builtin:python_docs`: the
language-reference topics and the standard library's docstrings) and the docstrings of large
installed packages (numpy, torch, scipy, scikit-learn, matplotlib, pandas, sympy: whichever are
installed). English technical prose with code examples, deduplicated, docstrings of >= 100
characters only. The corpus depends on the installed versions: `manifest.json` lists them and the
size of every file, so a run can say exactly what it trained on.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
from pathlib import Path

from hyla.tasks.text import open_corpus, source_docstrings

PACKAGES = ("numpy", "torch", "scipy", "sklearn", "matplotlib", "pandas", "sympy")
DISTRIBUTIONS = {"sklearn": "scikit-learn"}


def package_docstrings(package: str) -> list[str]:
    """Docstrings (>= 100 characters) of every module, class and function of an installed package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    return [
        doc
        for root in spec.submodule_search_locations
        for doc in source_docstrings(Path(root), {"tests", "test", "testing"})
    ]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("data/lm_docs"))
    p.add_argument("--packages", nargs="+", default=list(PACKAGES))
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    train, valid = open_corpus("builtin:python_docs").splits()
    sources = {"python_docs": [*train, *valid]}
    sources.update({package: package_docstrings(package) for package in args.packages})
    seen, manifest = set(), {}
    for name, documents in sources.items():
        unique = [d for d in documents if not (d in seen or seen.add(d))]
        if not unique:
            continue
        path = args.out / f"{name}.txt"
        path.write_text("\n\n".join(unique) + "\n", encoding="utf-8")
        version = importlib.metadata.version(DISTRIBUTIONS.get(name, name)) if name != "python_docs" else None
        manifest[name] = dict(documents=len(unique), bytes=path.stat().st_size, version=version)
        print(f"{path}: {len(unique):,} documents, {path.stat().st_size / 2**20:.1f} MiB")
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
