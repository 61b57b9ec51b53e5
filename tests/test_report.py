"""make report's splicing (tests/support/doc_blocks.py, which bench/report/report.py fills the
docs with): generated blocks are replaced, nothing else."""

from pathlib import Path

import pytest

from tests.support import doc_blocks as report

DOCUMENT = """# Title

Prose with 12 figures that stays.

<!-- report:bench -->
old table
<!-- /report:bench -->

Between.

<!-- report:against e49a09c -->
old comparison
<!-- /report:against -->
"""


def test_a_block_is_replaced_and_the_rest_kept() -> None:
    spliced = report.splice(DOCUMENT, "bench", lambda argument: f"new table ({argument})\n")
    assert "new table (None)\n<!-- /report:bench -->" in spliced
    assert "old table" not in spliced
    assert "old comparison" in spliced
    assert spliced.replace("new table (None)", "old table") == DOCUMENT


def test_a_block_gets_its_argument() -> None:
    spliced = report.splice(DOCUMENT, "against", lambda argument: f"against {argument}")
    assert "<!-- report:against e49a09c -->\nagainst e49a09c\n<!-- /report:against -->" in spliced


def test_the_blocks_are_listed() -> None:
    assert report.blocks(DOCUMENT) == [("bench", None), ("against", "e49a09c")]


def test_a_missing_block_is_an_error() -> None:
    with pytest.raises(report.ReportError, match="report:chaos"):
        report.splice(DOCUMENT, "chaos", lambda argument: "x")


@pytest.mark.parametrize("name, path", sorted(report.DOCS.items()))
def test_the_documents_have_every_block(name: str, path: str) -> None:
    document = (Path(__file__).parent.parent / path).read_text()
    assert name in [block for block, _ in report.blocks(document)]
