#!/usr/bin/env python3
"""LayerSync end to end (`make demo`, docs/architecture.md §9). Nothing is faked.

For each PDF (default: three from the corpus) this program

1. starts the reference server on loopback with its embedded SQLite store (once),
   uploads the PDF through the admin API (its annotations are imported);
2. lets two clients, A and B, each with its own storage directory and driven through the
   C ABI by the `layersync` Python package, download it with a progress bar;
3. B listens for changes; A goes offline and edits (creates a note in non-Latin scripts
   with emoji, updates an imported annotation, deletes another) while B edits
   concurrently and syncs;
4. A comes online and syncs; B sees A's changes live (`did_receive_changes`);
5. A and B edit the same record; A syncs first and wins, B's change is rejected
   (`did_reject_changes`) and B adopts the server version;
6. A's token expires: sync fails (`did_fail_authentication`, `request_token`), A
   reauthenticates with a fresh token and the pending edit goes through;
7. both clients' records must equal each other and the server's (admin API), and the
   PDF exported with the layer's annotations written in is checked with pikepdf.

The server's dashboard URL is printed once it runs; ``--keep-server`` (``make demo
KEEP=1``) keeps the server up at the end until Ctrl-C, to look at the result there.
Every step is printed with its duration, and a table at the end. Exit status 0 only if
every step passed.

    python examples/python/demo.py [--pdf PATH ...] [--keep] [--keep-server] [--library PATH]
"""
from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

REPO = Path(__file__).resolve().parents[2]
# The shared corpus beside the checkout (../shared/corpus/pdf; `make SHARED=...` or
# LAYERSYNC_CORPUS moves it).
CORPUS = Path(os.environ.get("LAYERSYNC_CORPUS",
                             Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "pdf"))
DEFAULT_PDFS = ["pdfjs-pr20043.pdf", "pdfjs-issue20504.pdf", "pdfjs-prefilled_f1040.pdf"]

NEW_TEXT = "Привет из LayerSync · مرحبا · 你好 · नमस्ते · שלום 👋🏽🎉"
EDIT_TEXT = "edited offline by A ✍️ — ελληνικά"


# ---------------------------------------------------------------------------------------
# Step bookkeeping


class AbortDocument(Exception):
    """A step the rest of a document's run depends on failed."""


@dataclass
class Row:
    pdf: str
    step: str
    seconds: float
    status: str  # ok / FAIL / skip
    detail: str = ""


@dataclass
class Step:
    detail: str = ""
    status: str = "ok"


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    verbose: bool = False

    @contextlib.contextmanager
    def step(self, pdf: str, name: str, *, critical: bool = False) -> Iterator[Step]:
        s = Step()
        start = time.monotonic()
        try:
            yield s
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            s.status = "FAIL"
            s.detail = f"{type(exc).__name__}: {exc}"
            if self.verbose:
                traceback.print_exc()
        seconds = time.monotonic() - start
        self.rows.append(Row(pdf, name, seconds, s.status, s.detail))
        mark = {"ok": "✓", "FAIL": "✗", "skip": "–"}.get(s.status, "?")
        print(f"  {mark} {name:<46} {seconds * 1000:9.1f} ms  {s.detail}", flush=True)
        if s.status == "FAIL" and critical:
            raise AbortDocument(name)

    def skip(self, pdf: str, name: str, why: str) -> None:
        self.rows.append(Row(pdf, name, 0.0, "skip", why))
        print(f"  – {name:<46} {'':>12}  skipped: {why}", flush=True)

    @property
    def failed(self) -> list[Row]:
        return [r for r in self.rows if r.status == "FAIL"]

    def table(self) -> str:
        headers = ("pdf", "step", "ms", "result", "detail")
        body = [(r.pdf, r.step, f"{r.seconds * 1000:.1f}", r.status, r.detail) for r in self.rows]
        widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(headers)]
        widths[4] = min(widths[4], 90)

        def line(cells: tuple[str, ...]) -> str:
            out = []
            for i, c in enumerate(cells):
                c = c if len(c) <= widths[i] else c[: widths[i] - 1] + "…"
                out.append(c.rjust(widths[i]) if i == 2 else c.ljust(widths[i]))
            return " │ ".join(out).rstrip()

        sep = "─┼─".join("─" * w for w in widths)
        return "\n".join([line(headers), sep, *(line(r) for r in body)])


class Check(Exception):
    """A demo expectation did not hold."""


def expect(cond: bool, message: str) -> None:
    if not cond:
        raise Check(message)


# ---------------------------------------------------------------------------------------
# Helpers


def jwt_exp(jwt: str) -> float:
    payload = jwt.split(".")[1]
    payload += "=" * (-len(payload) % 4)
    return float(json.loads(base64.urlsafe_b64decode(payload))["exp"])


def note(text: str, page: int = 0, x: float = 40) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"v": 2, "type": "pspdfkit/note", "pageIndex": page, "bbox": [x, 40, 24, 24],
            "opacity": 1, "icon": "comment", "color": "#FFD700", "creatorName": "LayerSync demo",
            "createdAt": now, "updatedAt": now, "text": {"format": "plain", "value": text}}


def text_of(content: dict[str, Any] | None) -> str | None:
    if not content:
        return None
    t = content.get("text")
    if isinstance(t, dict):
        return t.get("value")
    return t if isinstance(t, str) else None


def with_text(content: dict[str, Any], text: str) -> dict[str, Any]:
    """A copy of an annotation with new text (or customData for types without text)."""
    out = json.loads(json.dumps(content))
    if "text" in out and isinstance(out["text"], dict):
        out["text"] = dict(out["text"], format="plain", value=text)
    elif out.get("type") in ("pspdfkit/note", "pspdfkit/text"):
        out["text"] = {"format": "plain", "value": text}
    else:
        out["customData"] = dict(out.get("customData") or {}, demo=text)
    return out


def content_of(record: dict[str, Any]) -> dict[str, Any]:
    """A record handed out, without its ownership and flags (``layersync.HANDOUT_KEYS``): its
    Instant JSON content, as the server has it."""
    import layersync
    return layersync.record_content(record)


def by_id(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {a["id"]: a for a in items}


def diff(name_a: str, a: dict[str, Any], name_b: str, b: dict[str, Any], limit: int = 3) -> str:
    problems = []
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    if only_a:
        problems.append(f"{len(only_a)} only in {name_a} ({', '.join(only_a[:limit])})")
    if only_b:
        problems.append(f"{len(only_b)} only in {name_b} ({', '.join(only_b[:limit])})")
    changed = [k for k in sorted(set(a) & set(b)) if a[k] != b[k]]
    if changed:
        k = changed[0]
        keys = sorted(set(a[k]) | set(b[k]))
        fields = [f for f in keys if a[k].get(f) != b[k].get(f)]
        problems.append(f"{len(changed)} differ (e.g. {k}: fields {fields})")
    return "; ".join(problems)


def progress_bar(label: str) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    from tqdm import tqdm
    bar = tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024, desc=f"    {label}",
               leave=False, file=sys.stderr, dynamic_ncols=True)

    def update(done: int, total: int) -> None:
        if total and bar.total != total:
            bar.total = total
            bar.refresh()
        bar.update(max(0, done - bar.n))
    return update, bar.close


# ---------------------------------------------------------------------------------------
# One document


@dataclass
class Party:
    name: str
    user_id: str
    client: Any
    doc: Any = None


def run_document(report: Report, server: Any, pdf: Path, index: int, a: Party, b: Party,
                 timeout: float, workdir: Path) -> None:
    import layersync

    label = pdf.name
    doc_id = f"demo-{index}-{pdf.stem}"[:100]
    step = lambda name, **kw: report.step(label, name, **kw)  # noqa: E731
    print(f"\n▶ {label}  (document {doc_id})", flush=True)

    with step("upload PDF (admin API, annotations imported)", critical=True) as s:
        info = server.upload(pdf, doc_id)
        s.detail = f"{info.get('byteSize', pdf.stat().st_size)} bytes, {info.get('pageCount')} pages, " \
                   f"{info.get('annotationCount')} annotations imported"

    for party in (a, b):
        with step(f"{party.name}: document_for_jwt", critical=True) as s:
            party.doc = party.client.document_for_jwt(server.mint_token(doc_id, user_id=party.user_id))
            expect(party.doc.id == doc_id, f"document id {party.doc.id!r}")
            s.detail = f"user {party.doc.user_id}, state {party.doc.state.name}"
        with step(f"{party.name}: download with progress", critical=True) as s:
            update, close = progress_bar(f"{party.name} {label}")
            seen: list[tuple[int, int]] = []

            def prog(done: int, total: int) -> None:
                seen.append((done, total))
                update(done, total)
            try:
                party.doc.download(wait=True, timeout=timeout, progress=prog)
            finally:
                close()
            size = Path(party.doc.pdf_path).stat().st_size
            expect(size == pdf.stat().st_size, f"downloaded {size} bytes, original {pdf.stat().st_size}")
            n = len(party.doc.list_annotations())
            s.detail = f"{size} bytes, {len(seen)} progress callbacks, {n} records, state {party.doc.state.name}"
        if not seen:
            report.rows[-1].status = "FAIL"
            report.rows[-1].detail += " (no download_progress callback)"

    A, B = a.doc, b.doc
    imported = A.list_annotations()
    with step("B: start listening") as s:
        B.start_listening()
        s.detail = (f"on the {B.listening_transport} (did_receive_changes will report server "
                    "changes)")

    # --- A offline + concurrent edits --------------------------------------------------
    created_a: dict[str, Any] = {}
    updated_id = deleted_id = None
    b_note: dict[str, Any] = {}
    with step("A: go offline (set_network_available false)", critical=True):
        a.client.set_network_available(False)

    def a_offline_edits() -> str:
        nonlocal created_a, updated_id, deleted_id
        created_a = A.create_annotation(note(NEW_TEXT, x=40))
        parts = [f"created {created_a['id']}"]
        candidates = sorted(imported, key=lambda r: (r.get("type") == "pspdfkit/widget", r["id"]))
        if candidates:
            target = candidates[0]
            A.update_annotation(with_text(target, EDIT_TEXT))
            updated_id = target["id"]
            parts.append(f"updated {target.get('type')} {updated_id}")
        if len(candidates) > 1:
            deleted_id = candidates[-1]["id"]
            A.delete_annotation(deleted_id)
            parts.append(f"deleted {deleted_id}")
        expect(A.has_unsynced_changes, "A has no unsynced changes after offline edits")
        return ", ".join(parts)

    def b_concurrent_edits() -> str:
        nonlocal b_note
        t0 = time.monotonic()
        b_note = B.create_annotation(note("B was here: Ünïcödé ✅ 🐍", x=80))
        B.sync(wait=True, timeout=timeout)
        return f"created {b_note['id']} and synced in {(time.monotonic() - t0) * 1000:.0f} ms"

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        fa = pool.submit(a_offline_edits)
        fb = pool.submit(b_concurrent_edits)
        with step("A (offline): create / update / delete", critical=True) as s:
            s.detail = fa.result(timeout)
        with step("B (concurrently): create + sync") as s:
            s.detail = fb.result(timeout)

    with step("A (offline): sync fails with REQUEST_FAILED") as s:
        try:
            A.sync(wait=True, timeout=timeout)
        except layersync.RequestFailedError as exc:
            s.detail = f"{exc.code_name}; edits kept pending: {A.has_unsynced_changes}"
            expect(A.has_unsynced_changes, "pending changes lost after offline sync failure")
        else:
            raise Check("sync succeeded while offline")

    mark_b = b.client.mark()
    with step("A: online again, sync", critical=True) as s:
        a.client.set_network_available(True)
        A.sync(wait=True, timeout=timeout)
        expect(not A.has_unsynced_changes, "A still has unsynced changes")
        if b_note:
            expect(b_note["id"] in by_id(A.list_annotations()), "A did not receive B's note")
        s.detail = f"state {A.state.name}; A has B's note: {bool(b_note)}"

    with step("B: sees A's changes live (did_receive_changes)") as s:
        wanted = {created_a.get("id"), updated_id, deleted_id} - {None}
        got: set[str] = set()

        def covers(e: Any) -> bool:
            value = e.args[0] if isinstance(e.args[0], dict) else {}
            for key in ("created", "updated", "deleted"):
                got.update(value.get(key) or [])
            return wanted <= got
        ev = b.client.wait_for("did_receive_changes", since=mark_b, document=B, predicate=covers, timeout=timeout)
        expect(text_of(B.get_annotation(created_a["id"])) == NEW_TEXT, "B's copy of A's note differs")
        if deleted_id:
            with contextlib.suppress(layersync.NoSuchAnnotationError):
                B.get_annotation(deleted_id)
                raise Check("B still has the record A deleted")
        n_events = len(b.client.events(mark_b, "did_receive_changes", B))
        s.detail = f"{len(wanted)} changed ids seen in {n_events} event(s); text byte-exact"

    # --- conflict -------------------------------------------------------------------------
    target_id = b_note.get("id") or created_a.get("id")
    with step("conflict: A and B edit the same record") as s:
        expect(bool(target_id), "no record to conflict on")
        base_a, base_b = A.get_annotation(target_id), B.get_annotation(target_id)
        mark_b = b.client.mark()
        A.update_annotation(with_text(base_a, "A edited first — wins 🥇"))
        B.update_annotation(with_text(base_b, "B edited second — loses 🥈"))
        A.sync(wait=True, timeout=timeout)
        B.sync(wait=True, timeout=timeout)
        s.detail = f"record {target_id}: A synced first, then B"
    with step("conflict: B gets did_reject_changes, adopts server") as s:
        try:
            ev = b.client.wait_for("did_reject_changes", since=mark_b, document=B, timeout=timeout,
                                   predicate=lambda e: any(r.get("id") == target_id for r in (e.args[0] or [])))
        except TimeoutError:
            seen = [f"{e.name}{'(' + json.dumps(e.args[0], ensure_ascii=False)[:120] + ')' if e.name == 'did_receive_changes' else ''}"
                    for e in b.client.events(mark_b, document=B) if e.name != "did_change_sync_state"]
            raise Check(f"no did_reject_changes for {target_id}: server has "
                        f"{text_of(server.annotations(doc_id).get(target_id))!r}, B has "
                        f"{text_of(B.get_annotation(target_id))!r}, A has {text_of(A.get_annotation(target_id))!r}; "
                        f"B's events: {', '.join(seen)}") from None
        rej = next(r for r in ev.args[0] if r.get("id") == target_id)
        print(f"      did_reject_changes: id={rej.get('id')} reason={rej.get('reason')!r} "
              f"local={text_of(rej.get('local'))!r} server={text_of(rej.get('server'))!r}")
        B.sync(wait=True, timeout=timeout)
        now_b = text_of(B.get_annotation(target_id))
        expect(now_b == "A edited first — wins 🥇", f"B kept {now_b!r}")
        s.detail = f"reason {rej.get('reason')!r}; B now has A's version"

    # --- JWT expiry and reauthentication -----------------------------------------------------
    short = server.mint_token(doc_id, user_id=a.user_id, expires_in_s=2)
    expiry_note: dict[str, Any] = {}
    with step("A: reauthenticate with a 2 s token") as s:
        A.reauthenticate(short, wait=True, timeout=timeout)
        s.detail = "did_finish_reauthentication"
    if report.rows[-1].status == "ok":
        with step("wait for the token to expire") as s:
            delay = max(0.0, jwt_exp(short) + 1.0 - time.time())
            time.sleep(delay)  # the token's lifetime is the point of this step
            s.detail = f"slept {delay:.1f} s past exp"
        mark_a = a.client.mark()
        with step("A: edit + sync with expired token fails") as s:
            expiry_note = A.create_annotation(note("after expiry ⌛ — 日本語", x=120))
            try:
                A.sync(wait=True, timeout=timeout)
            except layersync.LayerSyncError as exc:
                s.detail = f"did_fail_sync {exc.code_name}"
            else:
                raise Check("sync succeeded with an expired token")
        with step("A: did_fail_authentication + request_token") as s:
            ev = a.client.wait_for("did_fail_authentication", since=mark_a, document=A, timeout=timeout)
            err = ev.args[0]
            asked = a.client.events(mark_a, "request_token", A)
            if not asked:
                try:
                    a.client.wait_for("request_token", since=mark_a, document=A, timeout=5)
                    asked = [1]  # type: ignore[list-item]
                except TimeoutError:
                    pass
            expect(A.has_unsynced_changes, "pending change lost after auth failure")
            expect(bool(asked), "no request_token callback")
            s.detail = f"{err.code_name if err else '?'} (HTTP {err.http_status if err else '?'}); request_token asked"
        with step("A: reauthenticate with a fresh token, sync") as s:
            A.reauthenticate(server.mint_token(doc_id, user_id=a.user_id), wait=True, timeout=timeout)
            A.sync(wait=True, timeout=timeout)
            expect(expiry_note["id"] in server.annotations(doc_id), "the pending edit did not reach the server")
            s.detail = "pending edit reached the server"
    else:
        report.skip(label, "JWT expiry → reauthentication", "reauthenticate does not work")

    # --- convergence ----------------------------------------------------------------------
    with step("final sync of A and B") as s:
        A.sync(wait=True, timeout=timeout)
        B.sync(wait=True, timeout=timeout)
        s.detail = f"A {A.state.name}, B {B.state.name}"
    server_records = server.annotations(doc_id)
    with step("A == B == server (all records, all fields)") as s:
        ra = {k: content_of(v) for k, v in by_id(A.list_annotations()).items()}
        rb = {k: content_of(v) for k, v in by_id(B.list_annotations()).items()}
        problems = [p for p in (diff("A", ra, "B", rb), diff("A", ra, "server", server_records)) if p]
        expect(not problems, " | ".join(problems))
        expect(text_of(server_records[created_a["id"]]) == NEW_TEXT, "server text of A's note is not byte-exact")
        s.detail = f"{len(ra)} records identical on A, B and server"
    with step("B: stop listening"):
        B.stop_listening()

    with step("export PDF with layer, check with pikepdf") as s:
        import pikepdf
        data = server.admin_request(f"/api/documents/{doc_id}/pdf")
        out = workdir / f"{doc_id}.pdf"
        out.write_bytes(data)
        with pikepdf.open(io.BytesIO(data)) as exported:
            annots = [an for page in exported.pages for an in (page.obj.get("/Annots") or [])
                      if str(an.get("/Subtype")) != "/Popup"]
            contents = [str(an.get("/Contents", "")) for an in annots]
        expected = [c for c in server_records.values()
                    if c.get("type") not in ("pspdfkit/comment",)]
        expect(len(annots) == len(expected),
               f"{len(annots)} annotations in the PDF, {len(expected)} live records on the server")
        expect(any(NEW_TEXT == c for c in contents), "A's new note text is not in the PDF")
        s.detail = f"{len(annots)} annotations = {len(expected)} records; new text present; {out.name}"


# ---------------------------------------------------------------------------------------
# Review round: collaboration permissions (docs/protocol.md "Collaboration permissions")

REVIEWER = ["annotations:*:self", "annotations:view:all", "comments:view:all", "comments:reply:all"]
# The lead changes every annotation but moderates no one's words: comments of their own only.
LEAD = ["annotations:*:all", "comments:view:all", "comments:reply:all", "comments:edit:self",
        "comments:delete:self", "form-fields:*:all"]
GUEST = ["annotations:view:group=public", "comments:view:group=public"]


def run_review_round(report: Report, server: Any, pdf: Path, timeout: float, workdir: Path) -> None:
    """Two reviewers who may change only their own notes, a lead who may change every note
    (but only their own comments), and a
    guest who sees only the "public" group: each tries something forbidden and gets the clear
    error at once (nothing queued); the guest's client never receives a record outside its view,
    checked on the wire through a recording proxy, not only through the API."""
    import layersync
    sys.path.insert(0, str(REPO / "bindings" / "python" / "tests"))
    from faultproxy import Action, FaultProxy

    label = f"review {pdf.name}"
    doc_id = "demo-review"
    step = lambda name, **kw: report.step(label, name, **kw)  # noqa: E731
    print(f"\n▶ {label}  (document {doc_id}: collaboration permissions)", flush=True)
    clients: list[Any] = []
    answers: list[tuple[str, bytes]] = []  # (request path, answer body) of every guest request

    def recording(request: Any) -> Action:
        def record_answer(status: int, headers: dict[str, str], body: bytes) -> bytes:
            answers.append((request.path, body))
            return body
        return Action.mutate(record_answer)

    # The proxy speaks protocol version 1 (it answers the change stream with 404), so the
    # guest listens by long-poll through it and every answer it gets is recorded whole.
    proxy = FaultProxy(server.url, recording)

    def party(name: str, user: str, claim: list[str], url: str | None = None) -> Any:
        client = layersync.Client(url or server.url, workdir / f"review-{name}", sync_delay_s=None)
        clients.append(client)
        client.wait_validated(timeout=timeout)
        doc = client.document_for_jwt(server.mint_token(doc_id, user_id=user, collaboration_permissions=claim))
        doc.download(wait=True, timeout=timeout)
        return doc

    def refused(what: str, call: Callable[[], Any], doc: Any) -> str:
        try:
            call()
        except layersync.ForbiddenError as exc:
            expect(not doc.has_unsynced_changes, f"{what}: refused, but something was queued")
            return exc.message if hasattr(exc, "message") else str(exc)
        raise Check(f"{what} was allowed")

    try:
        with step("upload PDF for the review", critical=True):
            server.upload(pdf, doc_id)
        with step("lead, two reviewers, guest: download with their grants", critical=True) as s:
            lead = party("lead", "lena", LEAD)
            r1 = party("r1", "rui", REVIEWER)
            r2 = party("r2", "rosa", REVIEWER)
            guest = party("guest", "gus", GUEST, url=proxy.url)
            guest.start_listening()  # live changes reach the guest while the others work
            s.detail = "lead annotations:*:all + own comments; reviewers annotations:*:self + view:all; guest view:group=public"
        with step("lead: a public and a private note") as s:
            public = lead.create_annotation(dict(note("for the client 🌍"), group="public"))
            private = lead.create_annotation(dict(note("internal only 🔒", x=90), group="private"))
            lead.sync(wait=True, timeout=timeout)
            s.detail = f"public {public['id'][:8]}…, private {private['id'][:8]}…"
        with step("reviewers: own notes, flags on the others'") as s:
            n1 = r1.create_annotation(note("rui's remark", x=140))
            n2 = r2.create_annotation(note("rosa's remark", x=190))
            r1.sync(wait=True, timeout=timeout)
            r2.sync(wait=True, timeout=timeout)
            r1.sync(wait=True, timeout=timeout)
            seen = r1.get_annotation(n2["id"])
            expect(seen["createdBy"] == "rosa" and not seen["isEditable"] and not seen["isDeletable"],
                   f"rui sees rosa's note as {dict((k, seen.get(k)) for k in layersync.HANDOUT_KEYS)}")
            expect(n1["isEditable"] and n1["isDeletable"], "rui may not edit his own note")
            s.detail = "rosa's note: createdBy rosa, isEditable false, isDeletable false"
        with step("reviewer edits another reviewer's note: refused") as s:
            s.detail = refused("rui editing rosa's note",
                               lambda: r1.update_annotation(with_text(content_of(r1.get_annotation(n2["id"])), "rui was here")), r1)
        with step("reviewer deletes the lead's note: refused") as s:
            s.detail = refused("rosa deleting the lead's note", lambda: r2.delete_annotation(public["id"]), r2)
        with step("reviewer moves the lead's note to another group: refused") as s:
            s.detail = refused("rosa moving the lead's public note",
                               lambda: r2.update_annotation(dict(r2.get_annotation(public["id"]), group="private")), r2)
        with step("lead edits a reviewer's note: allowed") as s:
            lead.sync(wait=True, timeout=timeout)
            lead.update_annotation(with_text(content_of(lead.get_annotation(n1["id"])), "rui's remark, seen by the lead ✓"))
            lead.sync(wait=True, timeout=timeout)
            r1.sync(wait=True, timeout=timeout)
            expect(text_of(r1.get_annotation(n1["id"])) == "rui's remark, seen by the lead ✓", "rui did not get the lead's edit")
            s.detail = "synced to rui"
        with step("reviewer replies to the lead's note; lead edits that reply: refused") as s:
            reply = r1.create_comment(public["id"], "rui: could we say this more plainly?")
            r1.sync(wait=True, timeout=timeout)
            lead.sync(wait=True, timeout=timeout)
            theirs = lead.get_annotation(reply["id"])
            expect(theirs is not None and not theirs["isEditable"], "the lead does not see rui's reply as not editable")
            s.detail = refused("lena rewriting rui's reply",
                               lambda: lead.update_annotation(with_text(content_of(theirs), "lena's words")), lead)
        with step("guest: sees only the public note, edits refused") as s:
            guest.sync(wait=True, timeout=timeout)
            deadline = time.monotonic() + timeout  # the public note arrives by long-poll too
            while not any(path.endswith("/changes") or "/changes?" in path for path, _ in answers) \
                    and time.monotonic() < deadline:
                time.sleep(0.1)
            ids = {r["id"] for r in guest.list_annotations()}
            expect(ids == {public["id"]}, f"the guest sees {len(ids)} records: {sorted(ids)}")
            s.detail = refused("the guest editing the public note",
                               lambda: guest.update_annotation(with_text(content_of(guest.get_annotation(public["id"])), "guest")), guest)
        with step("guest: no private record on the wire") as s:
            guest.stop_listening()
            # Every byte the guest received, JSON or not (PDF, pages, long-polls): no text of a
            # note, remark or reply outside the public group.
            hidden = ["internal only", "rui's remark", "rosa's remark", "rui: could we say"]
            seen_text = [t for t in hidden if any(json.dumps(t)[1:-1].encode() in body or t.encode() in body
                                                  for _, body in answers)]
            expect(not seen_text, f"text outside the guest's view crossed the wire: {seen_text}")
            polls = sum(1 for path, _ in answers if "/changes" in path)
            expect(polls >= 1, "the guest's long-poll answers were not recorded")
            leaked, live = [], 0
            for _, body in answers:
                try:
                    answer = json.loads(body)
                except ValueError:
                    continue  # the PDF
                if not isinstance(answer, dict):
                    continue
                for key in ("records", "changes", "regranted"):
                    for record in answer.get(key) or []:
                        if isinstance(record, dict) and not record.get("deleted"):
                            live += 1
                            if record.get("group") != "public":
                                leaked.append(record.get("id"))
            expect(not leaked, f"records outside the guest's view crossed the wire: {leaked}")
            expect(live >= 1, "the guest received no record at all")
            s.detail = (f"{len(answers)} answers recorded ({polls} long-poll), {live} live record(s), all in group "
                        f"public; no hidden text in any byte")
    finally:
        for c in clients:
            with contextlib.suppress(Exception):
                c.close()
        proxy.close()


# ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pdf", action="append", type=Path,
                        help=f"PDF to use (repeatable; default: {', '.join(DEFAULT_PDFS)} from {CORPUS})")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--keep-server", action="store_true",
                        help="at the end, keep the server (and its dashboard) up until Ctrl-C")
    parser.add_argument("--library", help="path of liblayersync (default: $LAYERSYNC_LIBRARY, "
                                          "then .build/debug/liblayersync.so)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per wait (default 60)")
    parser.add_argument("--verbose", action="store_true", help="print tracebacks of failed steps")
    args = parser.parse_args(argv)

    if args.library:
        os.environ["LAYERSYNC_LIBRARY"] = args.library
    os.environ.setdefault("LAYERSYNC_LIBRARY", str(REPO / ".build" / "debug" / "liblayersync.so"))
    import layersync
    from layersync.devserver import ReferenceServer

    pdfs = args.pdf or [CORPUS / name for name in DEFAULT_PDFS]
    for p in pdfs:
        if not p.is_file():
            parser.error(f"no such PDF: {p}")

    report = Report(verbose=args.verbose)
    workdir = Path(tempfile.mkdtemp(prefix="layersync-demo-"))
    print(f"LayerSync demo — bindings {layersync.__version__}, workdir {workdir}")
    server_cmd = REPO / ".venv" / "bin" / "layersync-server"
    server = ReferenceServer(workdir / "server", command=[str(server_cmd)] if server_cmd.exists() else None,
                             env={"LAYERSYNC_SERVER_JWT_LEEWAY_S": "0"})
    clients: list[Any] = []
    table_shown = False
    try:
        with report.step("setup", "load liblayersync (ABI check)", critical=True) as s:
            lib = layersync.get_library()
            s.detail = f"{layersync.library_version()} ABI {lib.layersync_abi_version()} from {lib._layersync_path}"
        with report.step("setup", "start reference server (SQLite)", critical=True) as s:
            server.start()
            s.detail = server.url
        print(f"  dashboard: {server.url}/dashboard (admin secret {server.admin_token!r})", flush=True)
        parties = []
        for name, user in (("A", "alice"), ("B", "bob")):
            with report.step("setup", f"client {name}: create + server_did_validate", critical=True) as s:
                c = layersync.Client(server.url, workdir / f"client-{name}", sync_delay_s=None,
                                     long_poll_wait_s=20)
                clients.append(c)
                info = c.wait_validated(timeout=args.timeout)
                s.detail = f"server {info.get('server_version')}, protocol {info.get('protocol')}"
            parties.append(Party(name, user, c))
        for i, pdf in enumerate(pdfs, 1):
            try:
                run_document(report, server, pdf, i, parties[0], parties[1], args.timeout, workdir)
            except AbortDocument as exc:
                print(f"  (rest of {pdf.name} skipped: {exc} failed)")
                report.skip(pdf.name, "remaining steps", f"after failed step {exc}")
            finally:
                for p in parties:
                    if p.doc is not None:
                        with contextlib.suppress(Exception):
                            p.doc.stop_syncing(True)
                    with contextlib.suppress(Exception):
                        p.client.set_network_available(True)
                    p.doc = None
        try:
            run_review_round(report, server, pdfs[0], args.timeout, workdir)
        except AbortDocument as exc:
            report.skip("review", "remaining steps", f"after failed step {exc}")
    except AbortDocument:
        pass
    finally:
        for c in clients:
            with contextlib.suppress(Exception):
                c.close()
        if args.keep_server and server.process is not None:
            print("\n" + report.table())
            table_shown = True
            print(f"\nserver kept up: dashboard at {server.url}/dashboard (admin secret "
                  f"{server.admin_token!r}); Ctrl-C stops it", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while server.process.poll() is None:
                    time.sleep(0.5)
        server.stop()
        if args.keep:
            print(f"\nkept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    total = sum(r.seconds for r in report.rows)
    if not table_shown:
        print("\n" + report.table())
    failed = report.failed
    print(f"\n{len(report.rows)} steps, {len(failed)} failed, {total:.2f} s in steps")
    if failed:
        print("FAILED: " + "; ".join(f"{r.pdf}: {r.step}" for r in failed))
        return 1
    print("all steps passed: clients and server agree, exported PDF verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
