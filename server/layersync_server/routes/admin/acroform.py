"""Form fields and their values as Instant JSON (``formFields`` and ``formFieldValues`` of
``document.json``; Document Engine's ``FormField`` and ``FormFieldValue`` schemas).

A PDF's form field is not a record: LayerSync stores the widgets (``pspdfkit/widget``
with ``formFieldName``, ``formFieldType``, ``value``) and reads the field's kind, options,
flags, label and defaults from the PDF the document was uploaded with
(:func:`form_fields`). A widget whose field the PDF does not have (made through the API)
gets a field from its ``formFieldType``. A field made through ``.../form-fields`` is a
``pspdfkit/form-field/...`` record and is given as it is stored.

A value lives on the widgets (:func:`form_field_values`, :func:`with_field_values`); a
``pspdfkit/form-field-value`` record (a sync client's) gives the value of a field whose
widgets give none.
"""

from __future__ import annotations

import io

import pikepdf

# the importer's own field naming, so a field's name matches its widgets' formFieldName
from layersync_server.pdf.import_ import _field_name as _full_name, field_node
from layersync_server.pdf.values import decode_text
from layersync_server.ids import derived_ulid
from layersync_server.record_kinds import FORM_FIELD_PREFIX, FORM_FIELD_VALUE_TYPE, WIDGET_TYPE

# /Ff bits (ISO 32000-1, 12.7.3.1 and 12.7.4)
_READ_ONLY, _REQUIRED, _NO_EXPORT = 1, 2, 4
_MULTILINE, _PASSWORD, _NO_SPELL, _NO_SCROLL, _COMB = 1 << 12, 1 << 13, 1 << 22, 1 << 23, 1 << 24
_NO_TOGGLE_OFF, _RADIO, _PUSH = 1 << 14, 1 << 15, 1 << 16
_COMBO, _EDIT, _MULTI_SELECT, _COMMIT = 1 << 17, 1 << 18, 1 << 21, 1 << 26


def _inherited(widget, key: str):
    node = field_node(widget, key)
    return None if node is None else node.get(key)


def _text(value) -> str | None:
    if isinstance(value, pikepdf.Name):
        return str(value)[1:]
    if isinstance(value, pikepdf.String):
        return decode_text(value)
    return None


def _on_state(widget) -> str | None:
    """The widget's ON appearance name (the /AP /N key other than Off)."""
    normal = widget.get("/AP", {}).get("/N") if isinstance(widget.get("/AP"), pikepdf.Dictionary) else None
    if isinstance(normal, pikepdf.Dictionary):
        for key in normal.keys():
            if key != "/Off":
                return key[1:]
    return None


def _choice_options(widget) -> list[dict]:
    options = []
    opt = _inherited(widget, "/Opt")
    for item in opt if isinstance(opt, pikepdf.Array) else []:
        if isinstance(item, pikepdf.Array) and len(item) >= 2:
            options.append({"value": _text(item[0]) or "", "label": _text(item[1]) or ""})
        else:
            options.append({"value": _text(item) or "", "label": _text(item) or ""})
    return options


def _values(value) -> list[str]:
    if isinstance(value, pikepdf.Array):
        return [v for v in (_text(item) for item in value) if v is not None]
    text = _text(value)
    return [] if text is None or text == "Off" else [text]


def _pdf_field(widgets: list) -> dict:
    """The Instant JSON form field (without ``id``/``annotationIds``) of a PDF field
    whose widgets are ``widgets`` (in page order)."""
    first = widgets[0]
    kind = _text(_inherited(first, "/FT"))
    flags = int(_inherited(first, "/Ff") or 0)
    label = decode_text(_inherited(first, "/TU")) or ""
    field = {"label": label, "flags": [name for bit, name in ((_READ_ONLY, "readOnly"),
                                                               (_REQUIRED, "required"),
                                                               (_NO_EXPORT, "noExport")) if flags & bit]}
    defaults = _values(_inherited(first, "/DV"))
    if kind == "Tx":
        max_length = _inherited(first, "/MaxLen")
        field.update(type="pspdfkit/form-field/text", password=bool(flags & _PASSWORD),
                     doNotSpellCheck=bool(flags & _NO_SPELL), doNotScroll=bool(flags & _NO_SCROLL),
                     multiLine=bool(flags & _MULTILINE), comb=bool(flags & _COMB),
                     defaultValue=defaults[0] if defaults else "")
        if isinstance(max_length, int) and max_length >= 0:
            field["maxLength"] = int(max_length)
    elif kind == "Btn" and flags & _PUSH:
        caption = first.get("/MK", {}).get("/CA") if isinstance(first.get("/MK"), pikepdf.Dictionary) else None
        field.update(type="pspdfkit/form-field/button", buttonLabel=decode_text(caption) or "")
    elif kind == "Btn":
        options = [{"label": state or "", "value": state or ""} for state in map(_on_state, widgets)]
        field.update(type="pspdfkit/form-field/radio" if flags & _RADIO else "pspdfkit/form-field/checkbox",
                     options=options, defaultValues=defaults)
        if flags & _RADIO:
            field["noToggleToOff"] = bool(flags & _NO_TOGGLE_OFF)
    elif kind == "Ch":
        field.update(options=_choice_options(first), multiSelect=bool(flags & _MULTI_SELECT),
                     commitOnChange=bool(flags & _COMMIT), defaultValues=defaults)
        if flags & _COMBO:
            field.update(type="pspdfkit/form-field/combobox", edit=bool(flags & _EDIT),
                         doNotSpellCheck=bool(flags & _NO_SPELL))
        else:
            field["type"] = "pspdfkit/form-field/listbox"
    else:
        field["type"] = "pspdfkit/form-field/signature"
    return field


def pdf_fields(pdf: bytes) -> dict[str, dict]:
    """Each AcroForm field of ``pdf`` that has widgets, by full name."""
    by_name: dict[str, list] = {}
    with pikepdf.open(io.BytesIO(pdf)) as parsed:
        for page in parsed.pages:
            for annot in page.obj.get("/Annots", []):
                if isinstance(annot, pikepdf.Dictionary) and annot.get("/Subtype") == "/Widget":
                    name = _full_name(annot)
                    if name:
                        by_name.setdefault(name, []).append(annot)
        return {name: _pdf_field(widgets) for name, widgets in by_name.items()}


_FALLBACK_TYPES = {"text": "pspdfkit/form-field/text", "button": "pspdfkit/form-field/checkbox",
                   "choice": "pspdfkit/form-field/combobox", "signature": "pspdfkit/form-field/signature"}


def _fallback_field(widgets: list[dict]) -> dict:
    kind = _FALLBACK_TYPES.get(widgets[0].get("formFieldType"), "pspdfkit/form-field/text")
    field = {"type": kind, "label": "", "flags": []}
    if kind == "pspdfkit/form-field/text":
        field.update(password=False, doNotSpellCheck=False, doNotScroll=False, multiLine=False,
                     comb=False, defaultValue="")
    elif kind == "pspdfkit/form-field/checkbox":
        field.update(options=[{"label": "Yes", "value": "Yes"} for _ in widgets], defaultValues=[])
    elif kind == "pspdfkit/form-field/combobox":
        field.update(options=[], multiSelect=False, commitOnChange=False, defaultValues=[], edit=False,
                     doNotSpellCheck=False)
    return field


def form_fields(widgets: list[dict], pdf: bytes | None) -> list[dict]:
    """Instant JSON form fields (``v`` 1) of the ``pspdfkit/widget`` record contents
    ``widgets``, in the order their first widget comes: ``{v, type, id, name, label,
    annotationIds, flags, ...}`` with what the PDF's field says (``pdf``: the stored
    PDF, or None). A field's ``id`` is its name (stable, unique per document)."""
    grouped: dict[str, list[dict]] = {}
    for widget in widgets:
        name = widget.get("formFieldName")
        if isinstance(name, str) and name:
            grouped.setdefault(name, []).append(widget)
    described = pdf_fields(pdf) if pdf is not None and grouped else {}
    fields = []
    for name, members in grouped.items():
        field = dict(described.get(name) or _fallback_field(members))
        field.update(v=1, id=name, name=name, annotationIds=[w["id"] for w in members])
        if "options" in field and field["type"] in ("pspdfkit/form-field/checkbox",
                                                     "pspdfkit/form-field/radio"):
            # one option per widget, in annotationIds' order (Document Engine's rule)
            options = field["options"]
            field["options"] = [options[i] if i < len(options) else {"label": "Yes", "value": "Yes"}
                                for i in range(len(members))]
        fields.append(field)
    return fields


def _field_value(value: object) -> object:
    """A widget's ``value`` as ``FormFieldValue.value`` (string, array of strings or null)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        return [v if isinstance(v, str) else str(v) for v in value]
    return str(value)


def form_field_values(records: list) -> list[tuple[dict, object]]:
    """The form field values of a layer's live records (``StoredRecord`` s, in layer
    order), each with the record it is read from: per field name, the ``value`` of the
    first widget that has one (``FormFieldValue``, v 1), else the field's first
    ``pspdfkit/form-field-value`` record as stored (the widgets win: their value is what
    the PDF export writes). ``document.json`` and ``GET .../form-field-values`` both
    answer with it."""
    from_widgets: dict[str, tuple[dict, object]] = {}
    from_records: dict[str, tuple[dict, object]] = {}
    for record in records:
        content = record.content
        kind, name = content.get("type"), content.get("name")
        if kind == WIDGET_TYPE:
            name = content.get("formFieldName")
            if "value" in content and isinstance(name, str) and name and name not in from_widgets:
                from_widgets[name] = ({"v": 1, "type": FORM_FIELD_VALUE_TYPE, "name": name,
                                       "value": _field_value(content["value"])}, record)
        elif kind == FORM_FIELD_VALUE_TYPE and isinstance(name, str) and name not in from_records:
            from_records[name] = (content, record)
    return list(from_widgets.values()) + [entry for name, entry in from_records.items()
                                          if name not in from_widgets]


def with_field_values(contents, values: dict[str, object]) -> tuple[list[dict], list[str]]:
    """``(records, unknown names)`` that set form field values ``values`` (field name →
    value) on a layer of ``contents``: its widget records of each field
    (``formFieldName``) with the new ``value``; for a field without widgets, its
    ``pspdfkit/form-field-value`` record with the value (made, with an id derived from the
    name, for a field made through ``.../form-fields``). Records already holding the value
    are left out. The names the layer has no field of (no widget, form field or value
    record: the value could be stored nowhere) are returned, not applied; the caller
    refuses or reports them (docs/protocol.md, "Form field values of unknown fields").
    Every path that applies form field values (Instant JSON and XFDF apply,
    ``/form-field-values``, ``pdf_with_instant_json``) sets them with it."""
    if not values:
        return [], []
    contents = list(contents)
    widgets = {c.get("formFieldName") for c in contents if c.get("type") == WIDGET_TYPE}
    value_records = {}
    for c in contents:
        if c.get("type") == FORM_FIELD_VALUE_TYPE and c.get("name") not in value_records:
            value_records[c.get("name")] = c
    fields = {c.get("name") for c in contents if str(c.get("type")).startswith(FORM_FIELD_PREFIX)}
    unknown = [name for name in values if name not in widgets | set(value_records) | fields]
    out = [dict(c, value=values[c["formFieldName"]]) for c in contents
           if c.get("type") == WIDGET_TYPE and c.get("formFieldName") in values
           and c.get("value") != values[c["formFieldName"]]]
    for name, value in values.items():
        if name in widgets or name in unknown:
            continue
        record = value_records.get(name) or {"v": 1, "type": FORM_FIELD_VALUE_TYPE,
                                              "id": derived_ulid("form-field-value", name), "name": name}
        if record.get("value") != value or name not in value_records:
            out.append(dict(record, value=value))
    return out, unknown
