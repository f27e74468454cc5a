"""`surgery releases` (no recipe) prints the release matrix with a legend (issue 53): every column and every
mark the tables use (`yes`, `-`, `+name`, `legacy+v2`, `N of M`...) is explained under them. A mark is any
word of a cell that is not read from the release data (a method, class, algorithm, count or version)."""
from __future__ import annotations

import re

import pytest

from surgery.engine.releases import release_data
from surgery.engine.matrix import LEGEND

NUMBER = re.compile(r"\d+(\.\d+)*")


@pytest.fixture(scope="module")
def printed():
    import contextlib
    import io

    from surgery.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["releases"]) == 0
    text = out.getvalue()
    tables, _, legend = text.partition("## Legend\n")
    assert legend, "no legend under the tables"
    return tables, legend


def data_names() -> set[str]:
    """Every name a cell may carry from the release data: methods, draft classes and their bases, the classes
    the plugin hooks, SGLang's algorithms."""
    names: set[str] = set()
    for facts in release_data("vllm")["releases"].values():
        names |= set(facts.get("methods", [])) | set(facts.get("draft_architectures", {}))
        names |= set((facts.get("gemma4_speculator") or {}).get("bases", []))
        names |= {k.rsplit(".", 1)[-1] for k in ((facts.get("hook_points") or {}).get("load_model") or {})}
    for facts in release_data("sglang")["releases"].values():
        names |= set(facts.get("algorithms", []))
    return names


def words(cell: str):
    """The words of a cell, a `+` / `-` prefix split off as a word of its own (`+Step5MTP` -> `+`, `Step5MTP`)."""
    for word in re.split(r"[\s,;]+", cell.strip()):
        if len(word) > 1 and word[0] in "+-":
            yield word[0]
            word = word[1:]
        if word:
            yield word


def rows(tables: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in tables.splitlines()
            if line.startswith("|") and not line.startswith("|---")]


def test_every_mark_of_the_tables_is_in_the_legend(printed):
    tables, legend = printed
    explained = {w for symbol, _ in LEGEND for w in words(symbol)}
    explained |= {w for span in re.findall(r"`([^`]+)`", legend) for w in words(span)}
    names = data_names()
    body = [row for row in rows(tables) if row[0] != "release"]  # a column title is checked whole below
    marks = {w for row in body for cell in row for w in words(cell) if w not in names and not NUMBER.fullmatch(w)}
    assert {"yes", "-", "+", "legacy+v2", "of"} <= marks, marks  # the test sees the marks it is about
    assert marks <= explained, f"marks with no legend entry: {sorted(marks - explained)}"
    # every ";" in a cell (count; additions; removals) is explained too
    assert ";" not in tables or ";" in {s for s, _ in LEGEND}


def test_every_column_is_in_the_legend(printed):
    tables, _ = printed
    headers = [row for row in rows(tables) if row[0] == "release"]
    assert len(headers) == 2  # vLLM and SGLang
    columns = {c for row in headers for c in row}
    assert columns <= {s for s, _ in LEGEND}, sorted(columns - {s for s, _ in LEGEND})


def test_the_legend_is_printed_under_the_tables(printed):
    _, legend = printed
    for symbol, meaning in LEGEND:
        assert f"- `{symbol}`: {meaning}" in legend
