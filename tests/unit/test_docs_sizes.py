"""Documents a user reads in minutes (issue #48): their sizes are held below what the issue allows."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Bytes, as `wc -c` counts them. Figures, history and options' meanings live elsewhere: BENCHMARKS.md keeps current
#: figures (history in docs/engineering/benchmark-history.md), configuration.md is a guide around the generated
#: docs/configuration-reference.md, with how the engines run in docs/engines.md.
LIMITS = {"BENCHMARKS.md": 35_000, "docs/configuration.md": 50_000}


@pytest.mark.parametrize(("document", "limit"), LIMITS.items())
def test_the_document_stays_readable_in_minutes(document: str, limit: int) -> None:
    size = (ROOT / document).stat().st_size
    assert size <= limit, f"{document} is {size} bytes, over {limit}: move history or detail out of it"
