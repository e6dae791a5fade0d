"""A PDF's document outline (``/Outlines``, PDF 32000-1 §12.3.3) ↔ Instant JSON
``pspdfkit/bookmark`` records (v 1): ``name`` = the item's ``/Title``, ``action`` =
``{"type": "goTo", "pageIndex"}`` for an item that goes to a page of the document
(``/Dest`` or a ``/GoTo`` action, named destinations resolved) or ``{"type": "uri",
"uri"}`` for a ``/URI`` action; items with another action are left in the PDF and are
not records. Instant's bookmarks are a flat list, so a nested outline is read depth
first.

Ids: an item's ``/LSYN_Id`` (written by the export) when it is a valid, unused id, else
derived from the PDF's SHA-256 and the item's position, so importing the same bytes
twice gives the same ids. The export keeps the original outline (nesting and all) when
the layer's bookmarks are the ones imported from it, stamping ``/LSYN_Id``; otherwise it
writes a flat outline from the records.
"""

from __future__ import annotations

import pikepdf
from pikepdf import Array, Dictionary, Name

from layersync_server.ids import derived_ulid, is_valid_pdf_name_id
from layersync_server.pdf.values import decode_text, encode_text
from layersync_formats.values import same_json

BOOKMARK_TYPE = "pspdfkit/bookmark"
#: The private key of an outline item holding its record id.
BOOKMARK_ID_KEY = "/LSYN_Id"
#: Most outline items read (a cycle of /Next or /First links ends there too).
MAX_ITEMS = 10_000


def _objgen(obj):
    gen = getattr(obj, "objgen", (0, 0))
    return gen if gen != (0, 0) else None


def _items(pdf: pikepdf.Pdf):
    """Every outline item, depth first (bounded, cycles skipped)."""
    outlines = pdf.Root.get("/Outlines")
    if not isinstance(outlines, Dictionary):
        return
    stack, seen, count = [outlines.get("/First")], set(), 0
    while stack and count < MAX_ITEMS:
        item = stack.pop()
        if not isinstance(item, Dictionary) or (_objgen(item) and _objgen(item) in seen):
            continue
        seen.add(_objgen(item))
        count += 1
        yield item
        stack.append(item.get("/Next"))
        stack.append(item.get("/First"))  # children before the next sibling


def _named_destination(pdf: pikepdf.Pdf, name) -> object:
    key = str(name).lstrip("/") if isinstance(name, pikepdf.Name) else decode_text(name)
    dests = pdf.Root.get("/Dests")
    if isinstance(dests, Dictionary) and ("/" + key) in dests:
        return dests["/" + key]
    names = pdf.Root.get("/Names")
    if isinstance(names, Dictionary) and isinstance(names.get("/Dests"), Dictionary):
        try:
            tree = pikepdf.NameTree(names.Dests)
            return tree[key] if key in tree else None
        except (pikepdf.PdfError, TypeError, ValueError, KeyError):
            return None
    return None


def _page_of_destination(pdf: pikepdf.Pdf, dest, pages: dict) -> int | None:
    if isinstance(dest, (pikepdf.Name, pikepdf.String)):
        dest = _named_destination(pdf, dest)
    if isinstance(dest, Dictionary):  # a named destination may be << /D [...] >>
        dest = dest.get("/D")
    if not isinstance(dest, Array) or len(dest) == 0:
        return None
    return pages.get(_objgen(dest[0]))


def _action(pdf: pikepdf.Pdf, item: Dictionary, pages: dict) -> dict | None:
    dest, action = item.get("/Dest"), item.get("/A")
    if dest is None and isinstance(action, Dictionary):
        if str(action.get("/S")) == "/URI":
            return {"type": "uri", "uri": decode_text(action.get("/URI")) or ""}
        if str(action.get("/S")) == "/GoTo":
            dest = action.get("/D")
    page_index = _page_of_destination(pdf, dest, pages) if dest is not None else None
    return {"type": "goTo", "pageIndex": page_index} if page_index is not None else None


def read_bookmarks(pdf: pikepdf.Pdf, sha256: str) -> list[tuple[dict, Dictionary]]:
    """``(bookmark record content, its outline item)`` of each outline item with an
    action Instant JSON has (see the module docs)."""
    pages = {_objgen(p.obj): i for i, p in enumerate(pdf.pages)}
    used: set[str] = set()
    out = []
    for position, item in enumerate(_items(pdf)):
        action = _action(pdf, item, pages)
        if action is None:
            continue
        record_id = decode_text(item.get(BOOKMARK_ID_KEY))
        if not (record_id and is_valid_pdf_name_id(record_id) and record_id not in used):
            record_id = derived_ulid("pdf-bookmark", sha256, str(position))
        used.add(record_id)
        out.append(({"v": 1, "type": BOOKMARK_TYPE, "id": record_id,
                     "name": decode_text(item.get("/Title")) or "", "action": action}, item))
    return out


def _item_action(pdf: pikepdf.Pdf, action: object) -> tuple[str, object] | None:
    """The ``/Dest`` or ``/A`` of a record's action; None when it has no PDF form here."""
    if not isinstance(action, dict):
        return None
    if action.get("type") == "goTo":
        page_index = action.get("pageIndex")
        if isinstance(page_index, float) and page_index.is_integer():
            page_index = int(page_index)
        if isinstance(page_index, int) and not isinstance(page_index, bool) \
                and 0 <= page_index < len(pdf.pages):
            return "/Dest", Array([pdf.pages[page_index].obj, Name.Fit])
    if action.get("type") == "uri" and isinstance(action.get("uri"), str):
        return "/A", Dictionary(S=Name.URI, URI=pikepdf.String(action["uri"]))
    return None


def write_bookmarks(pdf: pikepdf.Pdf, sha256: str, contents: list[dict]) -> list[str]:
    """Make ``pdf``'s outline say the bookmark records among ``contents``; returns the ids
    of those it cannot write (an action without a PDF form, a page the PDF lacks)."""
    bookmarks = [c for c in contents if c.get("type") == BOOKMARK_TYPE]
    imported = read_bookmarks(pdf, sha256)
    if same_json([c for c, _ in imported], bookmarks):
        for content, item in imported:  # the original outline, nesting and all
            item[Name(BOOKMARK_ID_KEY)] = encode_text(content["id"])
        return []
    skipped, items = [], []
    outlines = pdf.make_indirect(Dictionary(Type=Name.Outlines))
    for content in bookmarks:
        target = _item_action(pdf, content.get("action"))
        if target is None:
            skipped.append(str(content.get("id")))
            continue
        name = content.get("name") if isinstance(content.get("name"), str) else ""
        item = pdf.make_indirect(Dictionary(Title=encode_text(name), Parent=outlines))
        item[Name(target[0])] = target[1]
        item[Name(BOOKMARK_ID_KEY)] = encode_text(str(content["id"]))
        items.append(item)
    for before, after in zip(items, items[1:]):
        before.Next, after.Prev = after, before
    if items:
        outlines.First, outlines.Last, outlines.Count = items[0], items[-1], len(items)
        pdf.Root.Outlines = outlines
    elif "/Outlines" in pdf.Root:
        del pdf.Root["/Outlines"]
    return skipped
