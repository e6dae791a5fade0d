"""The Python examples of the READMEs run as written (only the server URL, the storage
directory and the JWT are this test's), twice on the same store: an app's second start
finds the layer downloaded."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = [
    (REPO / "README.md", "## Using Python"),
    (REPO / "bindings" / "python" / "README.md", "## Quick start"),
]
URL, STORE = "http://127.0.0.1:8000", "/tmp/layersync-store"


def _example(path: Path, heading: str) -> str:
    """The first ```python block after ``heading`` in ``path``."""
    text = path.read_text("utf-8")
    start = text.index(heading)
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert match is not None, f"no python block after {heading!r} in {path}"
    code = match.group(1)
    assert URL in code and STORE in code, "the example's URL or storage path changed: update this test"
    return code


@pytest.mark.parametrize("path,heading", EXAMPLES, ids=["README", "bindings-README"])
def test_the_readme_example_runs_twice(path, heading, server, uploaded, tmp_path, capsys):
    code = _example(path, heading).replace(URL, server.url).replace(STORE, str(tmp_path / "store"))
    doc_id = uploaded()
    before = set(server.annotations(doc_id))
    for _ in range(2):
        exec(compile(code, f"{path.name} example", "exec"), {"jwt": server.mint_token(doc_id)})
    new = {i: c for i, c in server.annotations(doc_id).items() if i not in before}
    assert [c["type"] for c in new.values()] == ["pspdfkit/note"] * 2  # one per run, synced
