"""Every ```python block of README.md and docs/*.md runs, as written.

The convention (also in docs/decisions.md, "Code blocks in the docs run"):

- Each ```python block is a test of its own: it runs in a fresh namespace (``__name__``
  is ``"__main__"``), with the working directory set to a new empty temporary
  directory, so relative paths such as ``"warehouse/events"`` make a throwaway
  warehouse. A block therefore brings its imports and its data. Blocks in other
  languages (```bash, ```json, a plain ```) are not run.
- An HTML comment on the line just before the opening fence changes that:

  ``<!-- run: continue -->``  the block runs after the page's previous Python block,
      in its namespace and directory: the two are one test. Consecutive blocks share a
      namespace only where the page says so, block by block, so that every other block
      can be copied on its own.
  ``<!-- run: ray -->``  the block uses Ray: it runs on the test session's Ray cluster
      and the test is marked ``ray`` (so ``make test-fast`` leaves it out).
  ``<!-- run: spark -->``  the block starts Spark (RayDP, on the session's Ray cluster):
      the test is marked ``spark`` and stops Spark afterwards.
  ``<!-- run: slow -->``  the test is marked ``slow`` (TensorFlow, large data).
  ``<!-- not-run: REASON -->``  the block cannot run here (a real cluster, cloud
      credentials): it is only compiled, and the test is skipped with REASON.

  Words combine: ``<!-- run: continue, ray -->``. An unknown word, an empty reason, a
  comment that no Python block follows, or a ``continue`` with nothing before it fails
  the collection, so that a typo cannot quietly turn a check off.
- Errors point into the page: the code is compiled with the page's file name and line
  numbers.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
WORDS = frozenset({"continue", "ray", "spark", "slow"})

_FENCE = re.compile(r"^(```+)\s*([\w+-]*)")
_MARK = re.compile(r"^<!--\s*(run|not-run)\s*:\s*(.*?)\s*-->\s*$")


class DocsConventionError(ValueError):
    """A page breaks the runnable-blocks convention (this module's docstring)."""


@dataclass(frozen=True)
class Block:
    """One ```python block: its page, the line of its first code line, its code."""

    page: Path
    line: int
    source: str
    words: frozenset[str] = frozenset()
    skip_reason: str | None = None

    @property
    def where(self) -> str:
        return f"{_name(self.page)}:{self.line}"

    def compiled(self) -> Any:
        # Blank lines in front, so that tracebacks name the page's own line numbers.
        return compile("\n" * (self.line - 1) + self.source, str(self.page), "exec")


@dataclass
class Chain:
    """Blocks that run one after another in one namespace: one test."""

    blocks: list[Block] = field(default_factory=list)

    @property
    def words(self) -> frozenset[str]:
        return frozenset().union(*(b.words for b in self.blocks))

    @property
    def skip_reason(self) -> str | None:
        return self.blocks[0].skip_reason


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name


def _mark_of(line: str, where: str) -> tuple[frozenset[str], str | None]:
    """The words of a ``run:`` comment, or the reason of a ``not-run:`` comment."""
    match = _MARK.match(line.strip())
    assert match is not None
    kind, rest = match.groups()
    if kind == "not-run":
        if not rest:
            raise DocsConventionError(f"{where}: not-run needs a reason")
        return frozenset(), rest
    words = frozenset(w.strip() for w in rest.split(",") if w.strip())
    if not words or words - WORDS:
        raise DocsConventionError(
            f"{where}: unknown words {sorted(words - WORDS) or [rest]} in a run comment "
            f"(known: {sorted(WORDS)})"
        )
    return words, None


def blocks_of(page: Path) -> list[Block]:
    """The ```python blocks of a page, with the run comment just before each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            if _MARK.match(lines[i].strip()):
                following = lines[i + 1] if i + 1 < len(lines) else ""
                follow = _FENCE.match(following)
                if follow is None or follow.group(2) not in ("python", "py"):
                    raise DocsConventionError(
                        f"{_name(page)}:{i + 1}: a run comment must stand on the "
                        "line just before a ```python block"
                    )
            i += 1
            continue
        ticks, info = fence.groups()
        end = i + 1
        while end < len(lines) and not lines[end].startswith(ticks):
            end += 1
        if info in ("python", "py"):
            where = f"{_name(page)}:{i + 1}"
            words, reason = frozenset(), None
            if i > 0 and _MARK.match(lines[i - 1].strip()):
                words, reason = _mark_of(lines[i - 1], where)
            source = "\n".join(lines[i + 1 : end]) + "\n"
            blocks.append(Block(page, i + 2, source, words, reason))
        i = end + 1
    return blocks


def chains_of(page: Path) -> list[Chain]:
    chains: list[Chain] = []
    for block in blocks_of(page):
        if "continue" not in block.words:
            chains.append(Chain([block]))
            continue
        if not chains:
            raise DocsConventionError(f"{block.where}: 'continue' with no block before it")
        if chains[-1].skip_reason is not None:
            raise DocsConventionError(f"{block.where}: 'continue' after a not-run block")
        chains[-1].blocks.append(block)
    return chains


def _params() -> Iterator[Any]:
    for page in PAGES:
        for chain in chains_of(page):
            marks = [getattr(pytest.mark, w) for w in ("ray", "spark", "slow") if w in chain.words]
            yield pytest.param(chain, id=chain.blocks[0].where, marks=marks)


@pytest.mark.parametrize("chain", list(_params()))
def test_block_runs(
    chain: Chain, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    codes = [block.compiled() for block in chain.blocks]  # a syntax error fails even a skip
    if chain.skip_reason is not None:
        pytest.skip(chain.skip_reason)
    if chain.words & {"ray", "spark"}:
        request.getfixturevalue("ray_cluster")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    try:
        for code in codes:
            exec(code, namespace)
    finally:
        # As at a script's exit: what the blocks left open (an abandoned iterator and
        # its read-ahead threads) is finalized here, not in whichever test comes later.
        namespace.clear()
        gc.collect()
        if "spark" in chain.words:
            import raylake.spark

            raylake.spark.stop()


# -- the collector itself --------------------------------------------------------------------


def test_blocks_are_read_with_their_comments(tmp_path: Path) -> None:
    page = tmp_path / "x.md"
    page.write_text(
        "# x\n```bash\nls\n```\n```python\na = 1\n```\n"
        "<!-- run: continue, ray -->\n```python\nb = a\n```\n"
        "<!-- not-run: needs a cluster -->\n```python\nc\n```\n"
    )
    chains = chains_of(page)
    assert [[b.source for b in c.blocks] for c in chains] == [["a = 1\n", "b = a\n"], ["c\n"]]
    assert chains[0].words == {"continue", "ray"} and chains[1].skip_reason == "needs a cluster"
    assert chains[0].blocks[1].line == 10  # the first code line, as tracebacks name it


@pytest.mark.parametrize(
    "text",
    [
        "<!-- run: rya -->\n```python\na\n```\n",
        "<!-- not-run: -->\n```python\na\n```\n",
        "<!-- run: ray -->\n\n```python\na\n```\n",
        "<!-- run: ray -->\n```bash\na\n```\n",
        "<!-- run: continue -->\n```python\na\n```\n",
    ],
)
def test_a_broken_convention_fails_the_collection(tmp_path: Path, text: str) -> None:
    page = tmp_path / "x.md"
    page.write_text(text)
    with pytest.raises(DocsConventionError):
        chains_of(page)


def test_every_page_is_read() -> None:
    names = {p.name for p in PAGES}
    assert {"README.md", "ray-data.md", "streaming.md", "training.md"} <= names
