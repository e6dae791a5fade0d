"""Shared pieces of the benchmarks: servers, tokens, seeding, statistics.

Everything here talks to real processes on loopback: the reference server started through
``layersync.devserver.ReferenceServer``, PostgreSQL through the server tests' ``pgcluster``.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterable

import jwt as pyjwt

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bindings" / "python"))
sys.path.insert(0, str(REPO / "server" / "tests"))

from layersync.devserver import ReferenceServer  # noqa: E402
from common_records import REVIEWER_CLAIMS, annotation, bench_id, percentile  # noqa: E402,F401

class Server(ReferenceServer):
    """ReferenceServer plus in-process JWT minting (the CLI's ``mint-token`` costs a
    Python start-up per token; scenario 6 needs a thousand)."""

    _key: Any = None

    def token(self, document_id: str, layer: str | None = None, user_id: str = "bench",
              extra_claims: dict[str, Any] | None = None) -> str:
        """A client JWT for the layer; ``extra_claims`` (e.g. ``REVIEWER_CLAIMS``) added."""
        if self._key is None:
            self._key = self.private_key.read_bytes()
        claims: dict[str, Any] = {"document_id": document_id, "user_id": user_id,
                                  "exp": int(time.time()) + 7200, **(extra_claims or {})}
        if layer:
            claims["layer"] = layer
        return pyjwt.encode(claims, self._key, algorithm="ES256")

    def admin_post(self, path: str, body: bytes, content_type: str = "application/json",
                   timeout: float = 600) -> Any:
        request = urllib.request.Request(self.url + path, data=body, method="POST", headers={
            "Authorization": f'Token token="{self.admin_token}"', "Content-Type": content_type})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def upload_bytes(self, pdf: bytes, document_id: str) -> Any:
        return self.admin_post(f"/api/documents?document_id={document_id}", pdf, "application/pdf")

    def seed(self, document_id: str, layer: str, count: int, *, chunk: int = 5000,
             prefix: str = "SEED") -> float:
        """Creates ``count`` annotations in a layer through ``apply_instant_json`` in chunks;
        returns the seconds it took."""
        path = (f"/api/documents/{document_id}/layers/{layer}/apply_instant_json" if layer
                else f"/api/documents/{document_id}/apply_instant_json")
        t0 = time.monotonic()
        for start in range(0, count, chunk):
            anns = [annotation(i, bench_id(prefix, i)) for i in range(start, min(count, start + chunk))]
            body = json.dumps({"format": "https://pspdfkit.com/instant-json/v1",
                               "annotations": anns}).encode()
            self.admin_post(path, body)
        return time.monotonic() - t0

    def metric(self, name: str) -> float | None:
        text = self.admin_request("/metrics").decode()
        total = None
        for line in text.splitlines():
            if line.startswith(name) and not line.startswith("#"):
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
        return total


def make_pdf(path: Path, size_bytes: int, pages: int = 10) -> Path:
    """A valid PDF of about ``size_bytes``: ``pages`` pages plus incompressible image data."""
    import pikepdf
    pdf = pikepdf.new()
    for _ in range(pages):
        pdf.add_blank_page(page_size=(612, 792))
    per_page = max(1, size_bytes // pages)
    for page in pdf.pages:
        data = os.urandom(per_page)
        side = int((per_page // 3) ** 0.5)
        image = pikepdf.Stream(pdf, data[: side * side * 3])
        image.Type, image.Subtype = pikepdf.Name.XObject, pikepdf.Name.Image
        image.Width, image.Height = side, side
        image.ColorSpace, image.BitsPerComponent = pikepdf.Name.DeviceRGB, 8
        page.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(Im0=image))
        page.Contents = pdf.make_stream(b"q 600 0 0 780 6 6 cm /Im0 Do Q")
    pdf.save(path, compress_streams=False)
    return path


# -- statistics -----------------------------------------------------------------------


def summary(values: Iterable[float]) -> dict[str, Any]:
    v = list(values)
    if not v:
        return {"n": 0}
    return {"n": len(v), "median": statistics.median(v), "min": min(v), "max": max(v),
            "p25": percentile(v, 0.25), "p75": percentile(v, 0.75), "samples": v}


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"cpus": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
        info["mem_gb"] = round(int(mem) / 1024 / 1024, 1)
        info["load_avg"] = os.getloadavg()
        info["kernel"] = os.uname().release
    except OSError:
        pass
    return info
