"""The dashboard's routes under ``/dashboard`` (server/README.md, "Dashboard").

Pages (HTML, autoescaped Jinja2 templates in ``templates/``): ``/dashboard`` the
documents (paged, searchable by title or id; upload by drag and drop or file input;
delete), ``/dashboard/documents/{id}`` a document's layers, ``.../layers/{layer}``
a layer's pages with their annotations and records, kept live by ``static/dashboard.js``
over ``/dashboard/api/.../changes`` (a long-poll on the server's own notifier),
``/dashboard/operations`` what ``/metrics`` and ``/healthz`` know. ``{layer}`` is
written as in the sync API: ``~`` is the default layer.

Auth (:mod:`.session`): the session cookie or ``Authorization: Token token="..."``;
pages answer a browser without either with the login form (303), the other routes
401. The whole router answers 404 when the server has no admin secret.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import jinja2
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from layersync_server import __version__
from layersync_server.auth import ADMIN_SCHEME
from layersync_server.context import (DEFAULT_LAYER_SEGMENT, AppContext, check_document_id,
                                      layer_from_segment, read_body, replayed_request, run_in_worker)
from layersync_server.dashboard import backend, session
from layersync_server.dashboard.render import PageImages, app_page_images
from layersync_server.errors import ApiError, invalid_request, not_found, unauthorized
from layersync_server.storage import DocumentInfo, LayerState, StoredRecord, is_postgres_url
from layersync_server.wire_json import json_problem

_HERE = Path(__file__).parent
_TEMPLATES = jinja2.Environment(loader=jinja2.FileSystemLoader(_HERE / "templates"),
                                autoescape=True, undefined=jinja2.StrictUndefined,
                                trim_blocks=True, lstrip_blocks=True)
_STATIC = {name: (_HERE / "static" / name).read_bytes() for name in ("dashboard.js", "dashboard.css")}
_STATIC_TYPES = {"js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8"}
#: Every dashboard answer: no script but our own file, no framing, no referrer to other
#: sites (``same-origin``: with ``no-referrer`` a browser sends ``Origin: null``).
_HEADERS = {"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                                       "img-src 'self'; connect-src 'self'; form-action 'self'; "
                                       "base-uri 'none'; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
            "X-Frame-Options": "DENY"}
DOCUMENTS_PER_PAGE = 20
#: Largest body of the small forms (login, logout, delete), bytes: read and bounded
#: before parsing, since the login form is open to anyone (413 above).
FORM_MAX_BYTES = 16 * 1024
PAGES_PER_VIEW = 10
#: Longest wait of the dashboard's own long-poll, seconds.
LIVE_WAIT_S = 20.0
_STARTED = time.time()

router = APIRouter(prefix="/dashboard", include_in_schema=False)


class _State:
    """Per-app dashboard state: page image caches and the dashboard's own open
    long-polls per layer (so a layer's "connected clients" leave them out)."""

    def __init__(self, images: PageImages):
        self.images = images
        self.viewers: dict[tuple[str, str], int] = {}


def _state(request: Request) -> _State:
    state = getattr(request.app.state, "dashboard", None)
    if state is None:
        state = request.app.state.dashboard = _State(app_page_images(request.app))
    return state


def _ctx(request: Request) -> AppContext:
    return request.app.state.ctx


def page_viewer(request: Request) -> session.Viewer | None:
    """Dependency of the pages: the viewer, or None (the page answers :func:`_to_login`)."""
    return session.viewer(request)


def _to_login(request: Request) -> Response:
    """303 to the login form, coming back here afterwards."""
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse("/dashboard/login?" + urlencode({"next": here}), 303, headers=_HEADERS)


def api_viewer(request: Request) -> session.Viewer:
    """Dependency of the other routes: the viewer, or 401."""
    found = session.viewer(request)
    if found is None:
        raise unauthorized("log in to the dashboard or send Authorization: Token token=\"...\"", ADMIN_SCHEME)
    return found


def _html(request: Request, template: str, status: int = 200, **values) -> HTMLResponse:
    viewer = values.pop("viewer", None)
    body = _TEMPLATES.get_template(template).render(
        csrf=getattr(viewer, "csrf", None) or "", version=__version__, seg=_segment,
        path=request.url.path, quote=_quote, **values)
    return HTMLResponse(body, status, headers={**_HEADERS, "Cache-Control": "no-store"})


def _quote(value: str) -> str:
    return quote(value, safe="")


def _segment(layer: str) -> str:
    return DEFAULT_LAYER_SEGMENT if layer == "" else quote(layer, safe="")


def _error_page(request: Request, viewer, exc: ApiError) -> HTMLResponse:
    return _html(request, "error.html", exc.status, viewer=viewer, error=exc)


# -- static files and login -------------------------------------------------------------------

@router.get("/static/{name}")
async def static_file(name: str, request: Request) -> Response:
    session.enabled_secret(request)
    data = _STATIC.get(name)
    if data is None:
        raise not_found(f"no file {name!r}")
    return Response(data, media_type=_STATIC_TYPES[name.rsplit(".", 1)[1]],
                    headers={**_HEADERS, "Cache-Control": "no-cache"})


async def _small_form(request: Request):
    """The request's form, its body bounded by :data:`FORM_MAX_BYTES` (Starlette alone
    would spool file parts of any size to disk).

    Raises:
        ApiError: 413 ``payload_too_large``; 400 as :func:`_unicode_form`.
    """
    body = await read_body(request, FORM_MAX_BYTES)
    return _unicode_form(await replayed_request(request, body).form())


def _unicode_form(form):
    """``form`` when every field's name and text value is Unicode text.

    Raises:
        ApiError: 400 ``invalid_request`` for a lone surrogate, which a multipart body
            makes by naming a charset whose decoder yields one (``charset=utf-7``,
            ``+2AA-``): no comparison with the secret or CSRF token and no page could
            encode it (it was 500, before the secret was counted).
    """
    for name, value in form.multi_items():
        if json_problem(name, None) or (isinstance(value, str) and json_problem(value, None)):
            raise invalid_request("form field holds invalid Unicode (lone surrogate)")
    return form


def _next_path(value: object) -> str:
    """Where to go after login: a dashboard path only (never another site)."""
    if isinstance(value, str) and value.startswith("/dashboard") and "//" not in value and "\\" not in value:
        return value
    return "/dashboard"


@router.get("/login")
async def login_form(request: Request, next: str | None = None) -> HTMLResponse:  # noqa: A002
    session.enabled_secret(request)
    return _html(request, "login.html", next=_next_path(next), failed=False)


@router.post("/login")
async def login(request: Request) -> Response:
    session.enabled_secret(request)
    session.check_origin(request)
    form = await _small_form(request)
    sent, target = form.get("secret"), _next_path(form.get("next"))
    if not isinstance(sent, str) or not session.check_secret(request, sent):
        await asyncio.sleep(0.25)  # a brute force goes slowly
        return _html(request, "login.html", 403, next=target, failed=True)
    response = RedirectResponse(target, 303, headers=_HEADERS)
    session.set_session_cookie(request, response)
    return response


@router.post("/logout")
async def logout(request: Request, viewer: session.Viewer = Depends(api_viewer)) -> Response:
    viewer.check(request, (await _small_form(request)).get("csrf"))
    response = RedirectResponse("/dashboard/login", 303, headers=_HEADERS)
    session.clear_session_cookie(request, response)
    return response


# -- documents --------------------------------------------------------------------------------

def _documents_page(ctx: AppContext, query: str, page: int) -> tuple[list[dict], int]:
    """One page of documents whose title or id contains ``query`` (any case), with
    their layers and record counts, and how many match."""
    storage = ctx.storage
    if query:
        needle = query.casefold()
        matching = [d for d in storage.list_documents()
                    if needle in d.document_id.casefold() or needle in d.title.casefold()]
        total = len(matching)
        docs = matching[(page - 1) * DOCUMENTS_PER_PAGE:page * DOCUMENTS_PER_PAGE]
    else:
        total = storage.count_documents()
        docs = storage.list_documents((page - 1) * DOCUMENTS_PER_PAGE, DOCUMENTS_PER_PAGE)
    rows = []
    for info in docs:
        layers = storage.list_layers(info.document_id)
        rows.append({"info": info, "layers": [(state, storage.count_records(info.document_id, state.name))
                                              for state in layers]})
    return rows, total


@router.get("")
@router.get("/")
async def documents(request: Request, q: str = Query("", max_length=200),
                    page: int = Query(1, ge=1, le=1_000_000),
                    viewer: session.Viewer | None = Depends(page_viewer)) -> Response:
    if viewer is None:
        return _to_login(request)
    ctx = _ctx(request)
    rows, total = await run_in_worker(_documents_page, ctx, q.strip(), page)
    pages = max(1, -(-total // DOCUMENTS_PER_PAGE))
    return _html(request, "documents.html", viewer=viewer, rows=rows, total=total, q=q, page=page,
                 pages=pages, max_upload_bytes=ctx.settings.max_upload_bytes,
                 page_url=lambda n: "/dashboard?" + urlencode({"q": q, "page": n}),
                 deleted=request.query_params.get("deleted"))


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


@router.post("/documents")
async def upload(request: Request, viewer: session.Viewer = Depends(api_viewer)) -> Response:
    """Multipart ``file`` (+ ``csrf``, ``title``?) → the admin API's upload; 303 to the
    new document (JSON ``{"document_id", "url"}`` for ``Accept: application/json``)."""
    ctx = _ctx(request)
    body = await read_body(request, ctx.settings.max_upload_bytes)
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise ApiError(400, "invalid_request", "send multipart/form-data with a 'file' part")
    form = _unicode_form(await replayed_request(request, body).form())
    viewer.check(request, form.get("csrf"))
    await form.close()
    try:
        info = await backend.upload_document(replayed_request(request, body), ctx)
    except ApiError as exc:
        if _wants_json(request):
            raise
        return _error_page(request, viewer, exc)
    url = f"/dashboard/documents/{_quote(info['document_id'])}"
    if _wants_json(request):
        return JSONResponse({"document_id": info["document_id"], "url": url}, headers=_HEADERS)
    return RedirectResponse(url, 303, headers=_HEADERS)


@router.post("/documents/{document_id}/delete")
async def delete(document_id: str, request: Request,
                 viewer: session.Viewer = Depends(api_viewer)) -> Response:
    """``csrf`` form field → the admin API's delete; 303 to the documents."""
    viewer.check(request, (await _small_form(request)).get("csrf"))
    await backend.delete_document(document_id, _ctx(request))
    return RedirectResponse("/dashboard?" + urlencode({"deleted": document_id}), 303, headers=_HEADERS)


def _document_or_404(ctx: AppContext, document_id: str) -> DocumentInfo:
    check_document_id(document_id)
    info = ctx.storage.get_document(document_id)
    if info is None:
        raise not_found(f"no document {document_id!r}")
    return info


def _connected(request: Request, document_id: str, layer: str) -> int:
    """Clients long-polling the layer now, not counting dashboards."""
    ctx, state = _ctx(request), _state(request)
    return max(0, ctx.notifier.waiting_on(document_id, layer)
               - state.viewers.get((document_id, layer), 0))


@router.get("/documents/{document_id}")
async def document(document_id: str, request: Request,
                   viewer: session.Viewer | None = Depends(page_viewer)) -> Response:
    if viewer is None:
        return _to_login(request)
    ctx = _ctx(request)

    def read():
        info = _document_or_404(ctx, document_id)
        return info, [(s, ctx.storage.count_records(document_id, s.name))
                      for s in ctx.storage.list_layers(document_id)]
    try:
        info, layers = await run_in_worker(read)
    except ApiError as exc:
        return _error_page(request, viewer, exc)
    rows = [{"state": s, "records": n, "clients": _connected(request, document_id, s.name),
             "viewers": _state(request).viewers.get((document_id, s.name), 0)} for s, n in layers]
    return _html(request, "document.html", viewer=viewer, info=info, layers=rows)


# -- a layer ----------------------------------------------------------------------------------

def _text(content: dict) -> str:
    """What a person reads of a record: its text, else its other words."""
    text = content.get("text")
    if isinstance(text, dict):
        text = text.get("value")
    if isinstance(text, str) and text:
        return text
    for key in ("title", "formFieldName", "name", "value", "note"):
        value = content.get(key)
        if isinstance(value, str) and value and key != "name":
            return value
    return ""


def _string(value) -> str:
    return value if isinstance(value, str) else ""


def _summary(record: StoredRecord) -> dict:
    content = record.content or {}
    author = _string(content.get("creatorName")) or record.updated_by or record.created_by or ""
    page = content.get("pageIndex")
    kind = content.get("type")
    return {"id": record.id, "revision": record.revision,
            "type": (kind if isinstance(kind, str) else "?").removeprefix("pspdfkit/"),
            "author": author, "group": _string(content.get("group")),
            "text": _text(content), "updated_at": record.updated_at or _string(content.get("updatedAt")),
            "page": page if isinstance(page, int) and not isinstance(page, bool) else None,
            "bbox": content.get("bbox"), "root_id": content.get("rootId")}


def _layer_view(ctx: AppContext, images: PageImages, document_id: str, layer: str,
                first_page: int) -> dict:
    storage = ctx.storage
    info = _document_or_404(ctx, document_id)
    state = storage.get_layer(document_id, layer)
    if state is None:
        raise not_found(f"no layer {layer!r}")
    records = [_summary(r) for r in storage.iter_records(document_id, layer)]
    state = storage.get_layer(document_id, layer) or state
    boxes = images.boxes(info.sha256, lambda: storage.read_pdf(document_id))
    by_page: dict[int | None, list[dict]] = {}
    for record in records:
        page = record["page"] if record["page"] is not None and record["page"] < len(boxes) else None
        by_page.setdefault(page, []).append(record)
    comments = {}
    for record in records:
        if isinstance(record["root_id"], str):
            comments[record["root_id"]] = comments.get(record["root_id"], 0) + 1
    last = min(len(boxes), first_page + PAGES_PER_VIEW)
    pages = []
    for index in range(first_page, last):
        box = boxes[index]
        listed = sorted(by_page.get(index, []), key=lambda r: r["revision"])
        for record in listed:
            record["overlay"] = box.overlay(record["bbox"]) if record["bbox"] is not None else None
        pages.append({"index": index, "box": box, "records": listed})
    return {"info": info, "state": state, "pages": pages, "page_count": len(boxes),
            "first_page": first_page, "others": by_page.get(None, []), "comments": comments,
            "record_count": len(records)}


@router.get("/documents/{document_id}/layers/{layer}")
async def layer_page(document_id: str, layer: str, request: Request,
                     first: int = Query(0, ge=0, le=1_000_000),
                     viewer: session.Viewer | None = Depends(page_viewer)) -> Response:
    if viewer is None:
        return _to_login(request)
    try:
        name = layer_from_segment(layer)
        view = await run_in_worker(_layer_view, _ctx(request), _state(request).images,
                                   document_id, name, first)
    except ApiError as exc:
        return _error_page(request, viewer, exc)
    state: LayerState = view["state"]
    live = {"document_id": document_id, "layer": name, "epoch": state.epoch,
            "revision": state.revision,
            "changes": f"/dashboard/api/documents/{_quote(document_id)}/layers/{_segment(name)}/changes",
            "record": f"/dashboard/documents/{_quote(document_id)}/layers/{_segment(name)}/record?id="}
    return _html(request, "layer.html", viewer=viewer, layer=name, live=live,
                 clients=_connected(request, document_id, name), per_view=PAGES_PER_VIEW, **view)


@router.get("/documents/{document_id}/layers/{layer}/pages/{page_index}.png")
async def page_image(document_id: str, layer: str, page_index: int, request: Request,
                     revision: int | None = Query(None, ge=0),
                     viewer: session.Viewer = Depends(api_viewer)) -> Response:
    """Page ``page_index`` of the layer's exported PDF as PNG, at the layer's current
    revision (cacheable when ``revision`` names it)."""
    ctx, images = _ctx(request), _state(request).images
    name = layer_from_segment(layer)
    check_document_id(document_id)
    state = await run_in_worker(ctx.storage.get_layer, document_id, name)
    if state is None:
        raise not_found(f"no layer {name!r}")
    key = (document_id, name, state.epoch, state.revision)
    png = images.cached_png(key, page_index)
    if png is None:
        pdf = images.exported(key)
        if pdf is None:
            pdf = (await backend.export_pdf(ctx, document_id, name)).body
            after = await run_in_worker(ctx.storage.get_layer, document_id, name)
            if after == state:  # nothing was written meanwhile: the export shows ``state``
                images.keep_exported(key, pdf)
        png = await run_in_worker(images.png, key, pdf, page_index)
        if png is None:
            raise not_found(f"no page {page_index}")
    cache = "private, max-age=86400" if revision == state.revision else "no-cache"
    return Response(png, media_type="image/png",
                    headers={**_HEADERS, "Cache-Control": cache,
                             "LayerSync-Layer-Revision": str(state.revision)})


def _record_detail(ctx: AppContext, document_id: str, layer: str, record_id: str) -> dict:
    storage = ctx.storage
    _document_or_404(ctx, document_id)
    record = storage.get_record(document_id, layer, record_id)
    if record is None:
        raise not_found(f"no record {record_id!r}")
    history = storage.record_history(document_id, layer, record_id)
    thread = [_summary(r) | {"content": r.content} for r in storage.iter_records(document_id, layer)
              if r.content and r.content.get("rootId") == record_id and r.id != record_id]
    thread.sort(key=lambda r: (str(r["content"].get("createdAt", "")), r["revision"]))
    return {"record": record, "summary": _summary(record) if not record.deleted else None,
            "json": json.dumps(record.content, indent=2, ensure_ascii=False, sort_keys=True),
            "history": [{"version": v, "json": json.dumps(v.content, indent=2, ensure_ascii=False,
                                                          sort_keys=True)} for v in history],
            "thread": thread}


@router.get("/documents/{document_id}/layers/{layer}/record")
async def record_detail_by_query(document_id: str, layer: str, request: Request,
                                 id: str = Query(..., min_length=1),  # noqa: A002
                                 viewer: session.Viewer = Depends(api_viewer)) -> HTMLResponse:
    """:func:`record_detail` of the record ``id``: what the page's script asks for, as a
    record id such as ``..`` at the end of a path is resolved away by the browser."""
    return await record_detail(document_id, layer, id, request, viewer)


@router.get("/documents/{document_id}/layers/{layer}/records/{record_id:path}")
async def record_detail(document_id: str, layer: str, record_id: str, request: Request,
                        viewer: session.Viewer = Depends(api_viewer)) -> HTMLResponse:
    """An HTML fragment: the record's Instant JSON, its history, its comment thread."""
    name = layer_from_segment(layer)
    detail = await run_in_worker(_record_detail, _ctx(request), document_id, name, record_id)
    return _html(request, "record.html", viewer=viewer, **detail)


@router.get("/documents/{document_id}/layers/{layer}/export.pdf")
async def export_pdf(document_id: str, layer: str, request: Request,
                     viewer: session.Viewer = Depends(api_viewer)) -> Response:
    name = layer_from_segment(layer)
    response = await backend.export_pdf(_ctx(request), document_id, name)
    filename = f"{document_id}{'-' + name if name else ''}.pdf"
    response.headers["Content-Disposition"] = f"attachment; filename*=UTF-8''{_quote(filename)}"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


@router.get("/documents/{document_id}/layers/{layer}/export.json")
async def export_instant_json(document_id: str, layer: str, request: Request,
                              viewer: session.Viewer = Depends(api_viewer)) -> Response:
    name = layer_from_segment(layer)
    body = await backend.instant_json(_ctx(request), document_id, name)
    filename = f"{document_id}{'-' + name if name else ''}.instant.json"
    return Response(json.dumps(body, ensure_ascii=False, indent=2), media_type="application/json",
                    headers={**_HEADERS,
                             "Content-Disposition": f"attachment; filename*=UTF-8''{_quote(filename)}"})


# -- live -------------------------------------------------------------------------------------

@router.get("/api/documents/{document_id}/layers/{layer}/changes")
async def live_changes(document_id: str, layer: str, request: Request,
                       since: int = Query(0, ge=0), wait: float = Query(0, ge=0, le=LIVE_WAIT_S),
                       viewer: session.Viewer = Depends(api_viewer)) -> JSONResponse:
    """Long-poll for the page's script: ``{"epoch", "revision", "changed": [{"id",
    "revision", "deleted", "page"}], "has_more"}`` at once when the layer is past
    ``since`` (or another epoch: the script reloads), else after a commit to it or
    ``wait`` seconds. Waits on the server's own notifier, as the sync long-poll does."""
    ctx, dash = _ctx(request), _state(request)
    name = layer_from_segment(layer)
    check_document_id(document_id)
    state = await run_in_worker(ctx.storage.get_layer, document_id, name)
    if state is None:
        raise not_found(f"no layer {name!r}")
    if state.revision == since and wait > 0:
        key = (document_id, name)
        dash.viewers[key] = dash.viewers.get(key, 0) + 1
        try:
            await ctx.notifier.wait_for_change(document_id, name, since, state.revision,
                                               min(wait, ctx.settings.max_wait_s))
        finally:
            dash.viewers[key] -= 1
            if not dash.viewers[key]:
                del dash.viewers[key]
        state = await run_in_worker(ctx.storage.get_layer, document_id, name)
        if state is None:
            raise not_found(f"no layer {name!r}")
    changed, has_more = [], False
    if state.revision > since:
        page = await run_in_worker(ctx.storage.list_records, document_id, name, since, 500, True)
        state, has_more = page.layer, page.has_more
        changed = [{"id": r.id, "revision": r.revision, "deleted": r.deleted,
                    "page": (r.content or {}).get("pageIndex")} for r in page.records]
        if has_more:  # the script reloads the whole view anyway; say where the layer is
            state = await run_in_worker(ctx.storage.get_layer, document_id, name) or state
    return JSONResponse({"epoch": state.epoch, "revision": state.revision, "changed": changed,
                         "has_more": has_more,
                         "clients": _connected(request, document_id, name)},
                        headers={**_HEADERS, "Cache-Control": "no-store"})


# -- operations -------------------------------------------------------------------------------

def _quantile(buckets: list[tuple[float, float]], count: float, q: float) -> float | None:
    """The upper bound of the histogram bucket holding quantile ``q`` (a Prometheus-style
    estimate; None without observations)."""
    if count <= 0:
        return None
    for bound, cumulative in buckets:
        if cumulative >= q * count:
            return bound
    return None


def _shown_location(db) -> str:
    """Where the storage is, as the operations page shows it: a SQLite path, or a
    PostgreSQL URL without its password (in the user info or, as libpq also takes
    them, ``password``/``sslpassword`` query parameters)."""
    if not is_postgres_url(db):
        return str(db)
    parts = urlsplit(str(db))
    userinfo, at, hosts = parts.netloc.rpartition("@")
    netloc = f"{userinfo.split(':', 1)[0]}@{hosts}" if at and userinfo.split(":", 1)[0] else hosts
    query = urlencode([(key, "[redacted]" if "password" in key.lower() else value)
                       for key, value in parse_qsl(parts.query, keep_blank_values=True)], safe="[]")
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


def _operations(request: Request, dashboard_polls: int) -> dict:
    ctx = _ctx(request)
    metrics = request.app.state.metrics
    requests, durations = [], {}
    for family in metrics.registry.collect():
        if family.name == "layersync_http_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    requests.append((sample.labels, int(sample.value)))
        elif family.name == "layersync_sync_duration_seconds":
            for sample in family.samples:
                entry = durations.setdefault(sample.labels.get("endpoint"),
                                             {"buckets": [], "count": 0, "sum": 0.0})
                if sample.name.endswith("_bucket"):
                    entry["buckets"].append((float(sample.labels["le"]), sample.value))
                elif sample.name.endswith("_count"):
                    entry["count"] = int(sample.value)
                elif sample.name.endswith("_sum"):
                    entry["sum"] = sample.value
    requests.sort(key=lambda item: -item[1])
    by_class: dict[str, int] = {}
    for labels, count in requests:
        klass = labels["status"][:1] + "xx"
        by_class[klass] = by_class.get(klass, 0) + count
    timing = [{"endpoint": endpoint, "count": entry["count"],
               "mean_ms": 1000 * entry["sum"] / entry["count"] if entry["count"] else None,
               "p50_s": _quantile(entry["buckets"], entry["count"], 0.5),
               "p95_s": _quantile(entry["buckets"], entry["count"], 0.95)}
              for endpoint, entry in sorted(durations.items())]
    started = time.monotonic()
    try:
        ctx.storage.get_document("~")
        health = ("ok", None)
    except Exception as exc:  # noqa: BLE001 — shown, as /healthz would answer 500
        health = ("failing", f"{type(exc).__name__}: {exc}")
    health_ms = 1000 * (time.monotonic() - started)
    location = _shown_location(ctx.settings.db_path)
    return {"requests": requests[:40], "request_kinds": len(requests), "by_class": sorted(by_class.items()),
            "timing": timing, "open_long_polls": ctx.notifier.open_waits,
            "dashboard_long_polls": dashboard_polls,
            "backend": type(ctx.storage).__name__, "location": location,
            "health": health, "health_ms": health_ms, "documents": ctx.storage.count_documents(),
            "errors": [{"time": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)), "method": m,
                        "route": r, "path": p, "status": s}
                       for t, m, r, p, s in reversed(metrics.recent_errors)],
            "uptime_s": int(time.time() - _STARTED), "settings": ctx.settings}


@router.get("/operations")
async def operations(request: Request, viewer: session.Viewer | None = Depends(page_viewer)) -> Response:
    if viewer is None:
        return _to_login(request)
    return _html(request, "operations.html", viewer=viewer, **await run_in_worker(_operations, request, sum(_state(request).viewers.values())))

