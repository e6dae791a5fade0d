"""The dashboard (``/dashboard``): plain HTTP checks of its guards, then a real browser
(Debian's chromium, driven by Selenium through chromedriver) against the real server.

The browser logs in, uploads a corpus PDF, sees its page with the annotations drawn
(pixels of the page image where an annotation is, read back from the image the page
shows), selects a record, watches a client's edit (a sync request) appear without a
reload, and shows a record whose text is markup as text. With
``LAYERSYNC_SCREENSHOT=<path>`` the browser test saves a screenshot there (the README's
``docs/dashboard.png``).
"""

from __future__ import annotations

import base64
import concurrent.futures
import io
import os
from html import unescape
import re
import shutil
import time
import uuid

import httpx
import pikepdf
import pypdfium2
import pytest

from conftest import ADMIN_TOKEN, CORPUS, change, note, start_server, stop_server, synthetic_pdf

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SAMPLE = CORPUS / "sample-files-024-annotated_pdf.pdf"
#: Pixels per point of the dashboard's page images (layersync_server.dashboard.render.SCALE).
SCALE = 1.5
XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>&amp; "quoted"'


def _csrf(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def _logged_in(server) -> httpx.Client:
    """A client holding a dashboard session cookie (as a browser would)."""
    client = httpx.Client(base_url=server.url, timeout=30)
    response = client.post("/dashboard/login", data={"secret": ADMIN_TOKEN, "next": "/dashboard"})
    assert response.status_code == 303, response.text
    return client


def _multipart_pdf(pdf: bytes, **fields) -> dict:
    return {"files": {"file": ("upload.pdf", pdf, "application/pdf")}, "data": fields}


def _document_exists(server, document_id: str) -> bool:
    response = server.http.get(f"/api/documents/{document_id}", headers=server.admin())
    return response.status_code == 200


def _document_count(server) -> int:
    return server.http.get("/api/documents", headers=server.admin()).json()["document_count"]


# -- plain HTTP -------------------------------------------------------------------------------

def test_without_credentials_pages_ask_to_log_in_and_the_rest_is_refused(server):
    doc = server.new_document()
    plain = httpx.Client(base_url=server.url, timeout=30)
    response = plain.get("/dashboard", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/dashboard/login?next=%2Fdashboard"
    response = plain.get(f"/dashboard/documents/{doc}/layers/~", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"].startswith("/dashboard/login?next=")
    for path in (f"/dashboard/documents/{doc}/layers/~/pages/0.png",
                 f"/dashboard/documents/{doc}/layers/~/export.pdf",
                 f"/dashboard/documents/{doc}/layers/~/export.json",
                 f"/dashboard/documents/{doc}/layers/~/record?id=x",
                 f"/dashboard/api/documents/{doc}/layers/~/changes?since=0"):
        response = plain.get(path)
        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == "unauthorized"
    before = _document_count(server)
    assert plain.post("/dashboard/documents", **_multipart_pdf(SAMPLE.read_bytes())).status_code == 401
    assert plain.post(f"/dashboard/documents/{doc}/delete", data={"csrf": "x"}).status_code == 401
    assert _document_count(server) == before and _document_exists(server, doc)
    # a forged cookie is no session
    plain.cookies.set("layersync_dashboard", "nonce.9999999999.forged", path="/dashboard")
    assert plain.get("/dashboard", follow_redirects=False).status_code == 303


def test_login_asks_the_secret_once_and_keeps_it_in_an_http_only_strict_cookie(server):
    client = httpx.Client(base_url=server.url, timeout=30)
    wrong = client.post("/dashboard/login", data={"secret": "guess", "next": "/dashboard"})
    assert wrong.status_code == 403 and "That is not the admin secret" in wrong.text
    assert "set-cookie" not in wrong.headers
    right = client.post("/dashboard/login", data={"secret": ADMIN_TOKEN,
                                                   "next": "https://evil.example/"})
    assert right.status_code == 303
    assert right.headers["location"] == "/dashboard"  # never to another site
    cookie = right.headers["set-cookie"]
    assert cookie.startswith("layersync_dashboard=")
    assert ADMIN_TOKEN not in cookie
    for attribute in ("HttpOnly", "SameSite=strict", "Path=/dashboard"):
        assert attribute.lower() in cookie.lower(), cookie
    assert "secure" not in cookie.lower()  # plain http here; Secure over https
    page = client.get("/dashboard")
    assert page.status_code == 200 and "Documents" in page.text
    for header in ("content-security-policy", "x-frame-options", "x-content-type-options"):
        assert header in page.headers


def test_upload_and_delete_need_the_csrf_token(server):
    client = _logged_in(server)
    csrf = _csrf(client.get("/dashboard").text)
    pdf = synthetic_pdf([([0, 0, 300, 300], 0)])
    before = _document_count(server)
    for fields in ({}, {"csrf": "wrong"}, {"csrf": csrf + "x"}):
        response = client.post("/dashboard/documents", **_multipart_pdf(pdf, **fields))
        assert response.status_code == 403, fields
        assert "CSRF" in response.json()["error"]["message"]
    # the right token from another site's page is refused too
    response = client.post("/dashboard/documents", **_multipart_pdf(pdf, csrf=csrf),
                           headers={"Origin": "https://evil.example"})
    assert response.status_code == 403
    assert _document_count(server) == before

    response = client.post("/dashboard/documents", **_multipart_pdf(pdf, csrf=csrf))
    assert response.status_code == 303
    doc = response.headers["location"].rsplit("/", 1)[1]
    assert _document_exists(server, doc)
    for fields in ({}, {"csrf": "wrong"}):
        assert client.post(f"/dashboard/documents/{doc}/delete", data=fields).status_code == 403
    assert _document_exists(server, doc)
    response = client.post(f"/dashboard/documents/{doc}/delete", data={"csrf": csrf})
    assert response.status_code == 303
    assert not _document_exists(server, doc)
    # another session's token is not this session's
    other = _csrf(_logged_in(server).get("/dashboard").text)
    assert other != csrf
    doc = server.new_document()
    assert client.post(f"/dashboard/documents/{doc}/delete", data={"csrf": other}).status_code == 403
    assert _document_exists(server, doc)


def _big_multipart(size_bytes: int, **fields):
    """A multipart body with a file part of ``size_bytes`` and ``fields``, streamed."""
    def body():
        for name, value in fields.items():
            yield (f'--B\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n').encode()
        yield b'--B\r\nContent-Disposition: form-data; name="pad"; filename="pad"\r\n\r\n'
        for _ in range(size_bytes // 65536):
            yield b"x" * 65536
        yield b"\r\n--B--\r\n"
    return {"content": body(), "headers": {"Content-Type": "multipart/form-data; boundary=B"}}


def test_login_logout_and_delete_refuse_large_bodies_before_parsing_them(server):
    # the login form is open to anyone: a body of any size would be spooled to disk
    plain = httpx.Client(base_url=server.url, timeout=30)
    response = plain.post("/dashboard/login", **_big_multipart(4 << 20, secret=ADMIN_TOKEN))
    assert response.status_code == 413, response.text
    assert "set-cookie" not in response.headers
    big_form = {"secret": ADMIN_TOKEN, "next": "/dashboard", "pad": "x" * (512 * 1024)}
    assert plain.post("/dashboard/login", data=big_form).status_code == 413
    client = _logged_in(server)
    csrf = _csrf(client.get("/dashboard").text)
    doc = server.new_document()
    response = client.post(f"/dashboard/documents/{doc}/delete", **_big_multipart(4 << 20, csrf=csrf))
    assert response.status_code == 413 and _document_exists(server, doc)
    response = client.post("/dashboard/logout", **_big_multipart(4 << 20, csrf=csrf))
    assert response.status_code == 413
    # small forms still work, multipart or not
    response = client.post(f"/dashboard/documents/{doc}/delete", files={"csrf": (None, csrf)})
    assert response.status_code == 303 and not _document_exists(server, doc)


def _utf7_form(**fields: bytes) -> dict:
    """A multipart body that names the charset UTF-7, whose decoder turns ``+2AA-`` into a
    lone surrogate (Starlette decodes each field with the charset the body names)."""
    body = b"".join(b'--B\r\nContent-Disposition: form-data; name="' + name.encode() + b'"\r\n\r\n'
                    + value + b"\r\n" for name, value in fields.items()) + b"--B--\r\n"
    return {"content": body, "headers": {"Content-Type": "multipart/form-data; charset=utf-7; boundary=B"}}


def test_a_form_field_holding_a_lone_surrogate_is_400_on_login_logout_delete_and_upload(server):
    """Not 500: the login form (open to anyone: the secret, the next path), and the CSRF
    token of the forms behind the session."""
    plain = httpx.Client(base_url=server.url, timeout=30)
    for fields in ({"secret": b"+2AA-", "next": b"/dashboard"}, {"secret": b"x", "next": b"/dashboard+2AA-"}):
        response = plain.post("/dashboard/login", **_utf7_form(**fields))
        assert response.status_code == 400 and "lone surrogate" in response.text, response.text
        assert "set-cookie" not in response.headers
    client = _logged_in(server)
    doc = server.new_document()
    for path in (f"/dashboard/documents/{doc}/delete", "/dashboard/logout", "/dashboard/documents"):
        response = client.post(path, **_utf7_form(csrf=b"+2AA-"))
        assert response.status_code == 400, (path, response.text)
    assert _document_exists(server, doc)
    # a form in UTF-7 without one still works
    response = plain.post("/dashboard/login", **_utf7_form(secret=ADMIN_TOKEN.encode(), next=b"/dashboard"),
                          follow_redirects=False)
    assert response.status_code == 303, response.text


def test_scripts_may_use_the_admin_header_instead_of_the_cookie(server):
    headers = server.admin()
    response = server.http.get("/dashboard", headers=headers)
    assert response.status_code == 200
    response = server.http.post("/dashboard/documents", headers={**headers, "Accept": "application/json"},
                                **_multipart_pdf(SAMPLE.read_bytes()))
    assert response.status_code == 200, response.text
    doc = response.json()["document_id"]
    png = server.http.get(f"/dashboard/documents/{doc}/layers/~/pages/0.png", headers=headers)
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    exported = server.http.get(f"/dashboard/documents/{doc}/layers/~/export.pdf", headers=headers)
    assert exported.status_code == 200 and exported.content.startswith(b"%PDF")
    assert "attachment" in exported.headers["content-disposition"]
    instant = server.http.get(f"/dashboard/documents/{doc}/layers/~/export.json", headers=headers).json()
    assert len(instant["annotations"]) == 3
    wrong = server.http.get("/dashboard", headers={"Authorization": 'Token token="wrong"'})
    assert wrong.status_code == 401  # as the admin API answers a wrong admin token


def _comment(root_id: str, text: str, author: str) -> dict:
    return {"v": 2, "type": "pspdfkit/comment", "rootId": root_id, "pageIndex": 0,
            "text": {"format": "plain", "value": text}, "creatorName": author,
            "createdAt": "2025-01-02T00:00:00Z", "updatedAt": "2025-01-02T00:00:00Z"}


def test_record_text_is_escaped_in_every_page(server):
    doc = server.new_document()
    created = server.sync(doc, [change("create", "xss", note(XSS)),
                                change("create", "reply", _comment("xss", XSS, "<i>eve</i>"))], since=3)
    assert created.status_code == 200, created.text
    for path in (f"/dashboard/documents/{doc}/layers/~",
                 f"/dashboard/documents/{doc}/layers/~/records/xss"):
        html = server.http.get(path, headers=server.admin()).text
        assert "window.__xss" in html
        assert "<script>window" not in html and "<img src=x" not in html and "<i>eve" not in html
        assert "&lt;script&gt;window.__xss=2&lt;/script&gt;" in html


def test_a_record_shows_its_instant_json_history_and_comments(server):
    doc = server.new_document()
    first = server.sync(doc, [change("create", "n/1", note("first words"))], since=3).json()
    revision = first["accepted"][0]["revision"]
    server.sync(doc, [change("update", "n/1", note("second words"), base=revision),
                      change("create", "c1", _comment("n/1", "I agree", "carol")),
                      change("create", "c2", _comment("n/1", "Me too", "dave"))], since=revision)
    response = server.http.get(f"/dashboard/documents/{doc}/layers/~/records/n%2F1",
                               headers=server.admin())
    assert response.status_code == 200, response.text
    html = unescape(response.text)
    assert '"value": "second words"' in html  # the Instant JSON, as it is now
    assert html.count("<details>") == 2 and "first words" in html  # both kept versions
    thread = html[html.index('class="thread"'):]
    assert thread.index("carol") < thread.index("I agree") < thread.index("dave") < thread.index("Me too")
    assert server.http.get(f"/dashboard/documents/{doc}/layers/~/records/nope",
                           headers=server.admin()).status_code == 404
    # JSON embedded in the page is safe in a <script> element: no "</script>" inside
    html = server.http.get(f"/dashboard/documents/{doc}/layers/~", headers=server.admin()).text
    state = re.search(r'<script type="application/json" id="layer-state">(.*?)</script>', html, re.S)
    assert state is not None and "<" not in state.group(1)


def _connected_clients(server, doc: str) -> str:
    html = server.http.get(f"/dashboard/documents/{doc}", headers=server.admin()).text
    row = re.search(r'<tr data-layer="">(.*?)</tr>', html, re.S).group(1)
    return re.findall(r'<td class="num">(.*?)</td>', row, re.S)[-1].strip()


def test_a_layer_counts_the_clients_long_polling_it_now_but_not_dashboards(server):
    doc = server.new_document()
    assert _connected_clients(server, doc) == "0"
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        client = pool.submit(server.http.get, server.layer_url(doc) + "/changes",
                             params={"since": 3, "wait": 5}, headers=server.auth(doc))
        dashboard = pool.submit(server.http.get, f"/dashboard/api/documents/{doc}/layers/~/changes",
                                params={"since": 3, "wait": 5}, headers=server.admin())
        _wait(lambda: "dashboard" in _connected_clients(server, doc), what="both long-polls to wait")
        assert _connected_clients(server, doc).startswith("1 ")  # "1 (+1 dashboard)"
        server.sync(doc, [change("create", "wake", note("wake up"))], since=3)
        assert client.result().json()["records"][0]["id"] == "wake"
        answer = dashboard.result().json()
        assert answer["revision"] == 4 and [c["id"] for c in answer["changed"]] == ["wake"]
    assert _connected_clients(server, doc) == "0"


def test_a_page_image_is_cached_by_layer_revision(server):
    doc = server.new_document()
    path = f"/dashboard/documents/{doc}/layers/~/pages/0.png"
    first = server.http.get(path, params={"revision": 3}, headers=server.admin())
    assert first.headers["layersync-layer-revision"] == "3"
    assert "max-age" in first.headers["cache-control"]
    again = server.http.get(path, params={"revision": 3}, headers=server.admin())
    assert again.content == first.content
    server.sync(doc, [change("create", "box", _red_box([200, 400, 150, 100]))], since=3)
    after = server.http.get(path, params={"revision": 3}, headers=server.admin())
    assert after.headers["layersync-layer-revision"] == "4"
    assert after.headers["cache-control"] == "no-cache"  # not the revision asked for
    assert after.content != first.content
    assert server.http.get(f"/dashboard/documents/{doc}/layers/~/pages/9.png",
                           headers=server.admin()).status_code == 404


def test_a_pdf_pdfium_cannot_open_as_stored_still_shows_its_layer(server):
    """The upload reads PDFs with qpdf (pikepdf), which repairs what PDFium refuses: a
    truncated file, a PDF without pages. Their layers show, records and all."""
    whole = synthetic_pdf([([0, 0, 300, 300], 0), ([0, 0, 300, 300], 0)])
    empty = io.BytesIO()
    pikepdf.new().save(empty)
    for pdf, pages in ((whole[:len(whole) // 2], 2), (empty.getvalue(), 0)):
        response = server.upload(pdf)
        assert response.status_code == 200, response.text
        doc = response.json()["data"]["document_id"]
        assert server.sync(doc, [change("create", "n", note("still here"))]).status_code == 200
        view = server.http.get(f"/dashboard/documents/{doc}/layers/~", headers=server.admin())
        assert view.status_code == 200, view.text
        assert "still here" in view.text and view.text.count("<img") == pages
        image = server.http.get(f"/dashboard/documents/{doc}/layers/~/pages/0.png", headers=server.admin())
        assert image.status_code == (200 if pages else 404), image.text


def test_operations_page_shows_metrics_health_and_recent_errors(server):
    server.http.get("/sync/v1/documents/nope/layers/~/records")  # a 401 to remember
    page = server.http.get("/dashboard/operations", headers=server.admin())
    assert page.status_code == 200
    text = page.text
    assert 'id="health" class="ok"' in text
    assert "SqliteStorage" in text or "PostgresStorage" in text
    assert "/sync/v1/documents/nope/layers/~/records" in text  # in the recent errors
    assert "Open long-polls" in text and "Sync durations" in text


def test_operations_never_shows_a_database_password(tmp_path, keys, pg_cluster):
    url = pg_cluster.create_database("dash_" + uuid.uuid4().hex[:12])
    scheme, rest = url.split("://", 1)
    user, location = rest.split("@", 1)
    url = (f"{scheme}://{user}:in-userinfo@{location}"
           "?password=in-query&application_name=dash&sslpassword=ssl-secret")
    process, instance = start_server(tmp_path, url, *keys)
    try:
        page = instance.http.get("/dashboard/operations", headers=instance.admin())
        assert page.status_code == 200, page.text
        storage = re.search(r'<dd id="storage">(.*?)</dd>', page.text, re.S).group(1)
        assert "PostgresStorage" in storage and location.split("/")[0] in storage
        assert "application_name=dash" in storage
        for secret in ("in-userinfo", "in-query", "ssl-secret"):
            assert secret not in page.text, storage
    finally:
        stop_server(process, instance)


def test_the_dashboard_is_off_without_an_admin_secret(tmp_path, keys):
    process, instance = start_server(tmp_path, str(tmp_path / "db.sqlite"), *keys, "--admin-token", "")
    try:
        for path in ("/dashboard", "/dashboard/login", "/dashboard/static/dashboard.js",
                     "/dashboard/operations"):
            assert instance.http.get(path, follow_redirects=False).status_code == 404, path
        assert instance.http.post("/dashboard/login", data={"secret": ""}).status_code == 404
    finally:
        stop_server(process, instance)


# -- in a browser -----------------------------------------------------------------------------

def _red_box(bbox, **extra) -> dict:
    return {"v": 2, "type": "pspdfkit/shape/rectangle", "pageIndex": 0, "bbox": bbox,
            "strokeColor": "#C00000", "fillColor": "#FF0000", "strokeWidth": 2, "opacity": 1,
            "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z",
            "creatorName": "bob", **extra}


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("chromium and chromedriver are not installed (scripts/setup.sh installs "
                    "Debian's chromium and chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1500,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def _wait(condition, timeout_s: float = 10, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


_PIXELS = """
const [selector, x, y, w, h] = arguments;
const img = document.querySelector(selector);
if (!img || !img.complete || !img.naturalWidth) return null;
const canvas = document.createElement('canvas');
canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
const g = canvas.getContext('2d');
g.drawImage(img, 0, 0);
return [img.naturalWidth, img.naturalHeight, Array.from(g.getImageData(x, y, w, h).data)];
"""


def _shown_pixels(driver, page: int, box: tuple[int, int, int, int], revision: int):
    """``(image width, image height, [(r, g, b)...])`` of the page image the browser
    shows, inside pixel ``box`` ``(x, y, w, h)``, once it shows ``revision``."""
    selector = f'img[data-page="{page}"][src$="revision={revision}"]'
    width, height, data = _wait(lambda: driver.execute_script(_PIXELS, selector, *box),
                                what=f"page {page} at revision {revision}")
    return width, height, [tuple(data[i:i + 3]) for i in range(0, len(data), 4)]


def _pixel_box(bbox, outset: float = 0) -> tuple[int, int, int, int]:
    left, top, width, height = bbox
    return (int((left - outset) * SCALE), int((top - outset) * SCALE),
            int((width + 2 * outset) * SCALE), int((height + 2 * outset) * SCALE))


def _rows(driver) -> dict[str, str]:
    """Record id → text cell of every record row on the page."""
    return driver.execute_script("""
        const out = {};
        document.querySelectorAll('#pages tr.record').forEach(
            tr => { out[tr.dataset.recordId] = tr.querySelector('td.text').textContent; });
        return out;""")


def test_in_a_browser_upload_see_the_annotations_select_and_watch_live_edits(server, browser):
    driver = browser
    driver.get(server.url + "/dashboard")
    _wait(lambda: driver.find_elements("id", "secret"), what="the login form")
    driver.find_element("id", "secret").send_keys(ADMIN_TOKEN)
    driver.find_element("id", "login").click()
    _wait(lambda: driver.find_elements("id", "upload-file"), what="the documents page")

    # upload through the file input (the page's script sends it at once)
    driver.find_element("id", "upload-file").send_keys(str(SAMPLE))
    _wait(lambda: "/dashboard/documents/" in driver.current_url, what="the new document's page")
    doc = driver.current_url.rsplit("/", 1)[1]
    assert _document_exists(server, doc)
    driver.find_element("link text", "default").click()
    _wait(lambda: driver.find_elements("css selector", "#pages img"), what="the layer view")
    assert set(_rows(driver).values()) >= {"This is a text annotation.", "Highlight comment",
                                           "Hello world!"}

    # the page image shows the PDF's note annotation where its record says it is
    records = server.records(doc)["records"]
    note_record = next(r for r in records if r["content"]["type"] == "pspdfkit/note")
    # (PDFium draws the note's icon at a fixed size next to its tiny Rect: look around it)
    box = _pixel_box(note_record["content"]["bbox"], outset=20)
    _, _, shown = _shown_pixels(driver, 0, box, revision=3)
    plain = pypdfium2.PdfDocument(SAMPLE.read_bytes())
    try:
        bare = plain[0].render(scale=SCALE, draw_annots=False).to_pil().convert("RGB")
    finally:
        plain.close()
    x, y, w, h = box
    crop = bare.crop((x, y, x + w, y + h)).tobytes()
    bare_pixels = [tuple(crop[i:i + 3]) for i in range(0, len(crop), 3)]
    differing = sum(1 for a, b in zip(shown, bare_pixels) if max(abs(p - q) for p, q in zip(a, b)) > 40)
    assert differing > 0.1 * len(shown), (differing, len(shown))
    assert any(r > 200 and g > 180 and b < 120 for r, g, b in shown)  # the note's yellow

    # clicking a record highlights it on the page and shows its Instant JSON and history
    driver.find_element("css selector", f'tr.record[data-record-id="{note_record["id"]}"]').click()
    _wait(lambda: driver.find_elements("css selector", f'.record-detail[data-record-id="{note_record["id"]}"]'),
          what="the record's detail")
    assert "This is a text annotation." in driver.find_element("id", "record-json").text
    assert driver.find_elements("css selector", f'.box.selected[data-record-id="{note_record["id"]}"]')

    # a client's edit appears without a reload, highlighted, and is drawn on the page
    driver.execute_script("window.__notReloaded = true;")
    red_bbox = [260, 420, 160, 110]
    started = time.monotonic()
    pushed = server.sync(doc, [change("create", "red-box", _red_box(red_bbox, note="from bob"))],
                         since=3, user_id="bob")
    assert pushed.status_code == 200, pushed.text
    _wait(lambda: "red-box" in _rows(driver), timeout_s=5, what="the edit to appear")
    appeared_s = time.monotonic() - started
    assert driver.execute_script("return window.__notReloaded === true;")
    assert driver.find_elements("css selector", 'tr.record.changed[data-record-id="red-box"]')
    assert driver.find_element("id", "revision").text == "4"
    _, _, shown = _shown_pixels(driver, 0, _pixel_box(red_bbox, outset=-8), revision=4)
    red = sum(1 for r, g, b in shown if r > 200 and g < 60 and b < 60)
    assert red > 0.9 * len(shown), (red, len(shown))

    # record text is shown as text and never runs
    server.sync(doc, [change("create", "xss", note(XSS, bbox=[420, 60, 20, 20],
                                                      creatorName="<b>mallory</b>"))],
                since=4, user_id="mallory")
    _wait(lambda: "xss" in _rows(driver), timeout_s=5, what="the markup record")
    assert _rows(driver)["xss"] == XSS
    driver.find_element("css selector", 'tr.record[data-record-id="xss"]').click()
    _wait(lambda: driver.find_elements("css selector", '.record-detail[data-record-id="xss"]'),
          what="the markup record's detail")
    assert XSS.replace('"', '\\"') in driver.find_element("id", "record-json").text
    assert driver.execute_script("return window.__xss;") is None
    driver.refresh()
    _wait(lambda: "xss" in _rows(driver), what="the reloaded page")
    assert _rows(driver)["xss"] == XSS
    assert driver.execute_script("return window.__xss;") is None
    assert driver.execute_script("return window.__notReloaded;") is None  # (it did reload now)

    # the page that people look at: select the red box for the screenshot
    driver.find_element("css selector", 'tr.record[data-record-id="red-box"]').click()
    _wait(lambda: driver.find_elements("css selector", '.record-detail[data-record-id="red-box"]'),
          what="the red box's detail")
    _shown_pixels(driver, 0, (0, 0, 1, 1), revision=5)
    screenshot = os.environ.get("LAYERSYNC_SCREENSHOT")
    if screenshot:
        driver.save_screenshot(screenshot)
    assert appeared_s < 5


def test_in_a_browser_a_dropped_pdf_is_uploaded_and_operations_show(server, browser):
    driver = browser
    driver.get(server.url + "/dashboard")
    if driver.find_elements("id", "secret"):  # (this test may run alone)
        driver.find_element("id", "secret").send_keys(ADMIN_TOKEN)
        driver.find_element("id", "login").click()
    _wait(lambda: driver.find_elements("id", "upload"), what="the documents page")
    title = "dropped-" + uuid.uuid4().hex[:8]
    pdf = synthetic_pdf([([0, 0, 400, 300], 0), ([0, 0, 400, 300], 90)])
    driver.execute_script("""
        const [data, name] = arguments;
        const bytes = Uint8Array.from(atob(data), c => c.charCodeAt(0));
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], name, {type: 'application/pdf'}));
        const zone = document.getElementById('upload');
        zone.dispatchEvent(new DragEvent('dragover', {dataTransfer: transfer, bubbles: true, cancelable: true}));
        zone.dispatchEvent(new DragEvent('drop', {dataTransfer: transfer, bubbles: true, cancelable: true}));
    """, base64.b64encode(pdf).decode(), title + ".pdf")
    _wait(lambda: "/dashboard/documents/" in driver.current_url, what="the dropped document's page")
    doc = driver.current_url.rsplit("/", 1)[1]
    info = server.http.get(f"/api/documents/{doc}", headers=server.admin()).json()["data"]
    assert info["pageCount"] == 2 and info["title"] == title + ".pdf"

    driver.get(server.url + "/dashboard?" + httpx.QueryParams({"q": title.upper()}).__str__())
    ids = [e.get_attribute("data-document-id")
           for e in driver.find_elements("css selector", "#documents tr[data-document-id]")]
    assert ids == [doc]  # search by title, any case

    driver.get(server.url + "/dashboard/operations")
    health = _wait(lambda: driver.find_elements("id", "health"), what="the operations page")[0]
    assert health.text.startswith("ok")
    assert "Storage" in driver.find_element("css selector", ".facts").text


def test_in_a_browser_records_named_dot_or_dot_dot_show_their_own_detail(server, browser):
    """A browser resolves ``.`` and ``..`` path segments (``%2E`` too) before fetching:
    a record's detail must not be asked for by a path ending in its id."""
    driver = browser
    doc = server.new_document()
    assert server.sync(doc, [change("create", "..", note("dot dot")),
                             change("create", ".", note("dot"))], since=3).status_code == 200
    driver.get(server.url + f"/dashboard/documents/{doc}/layers/~")
    if driver.find_elements("id", "secret"):  # (this test may run alone)
        driver.find_element("id", "secret").send_keys(ADMIN_TOKEN)
        driver.find_element("id", "login").click()
    _wait(lambda: ".." in _rows(driver), what="the layer view")
    for record_id, text in (("..", "dot dot"), (".", "dot")):
        driver.find_element("css selector", f'tr.record[data-record-id="{record_id}"]').click()
        detail = _wait(lambda: driver.find_elements(
            "css selector", f'#detail > .record-detail[data-record-id="{record_id}"]'),
            what=f"the detail of record {record_id!r}")[0]
        assert f'"value": "{text}"' in detail.find_element("id", "record-json").text
        assert not driver.find_elements("css selector", "#detail #pages")
