"""The record kinds (layersync_server.record_kinds): one rule for which records are
annotations, comments, bookmarks, form fields and form field values, read by the admin
listings, document.json and the collaboration permissions."""

from __future__ import annotations

from layersync_server import record_kinds
from layersync_server.permissions import content_type_of
from layersync_server.record_kinds import INSTANT_JSON_KEYS, is_annotation, kind_of, record_kind
from layersync_formats.record_schema_generated import RECORDS


def test_every_schema_type_has_its_instant_json_key():
    expected = {"pspdfkit/comment": "comments", "pspdfkit/bookmark": "bookmarks",
                "pspdfkit/form-field-value": "formFieldValues"}
    for record_type in RECORDS:
        key = INSTANT_JSON_KEYS[record_kind(record_type)]
        if record_type.startswith("pspdfkit/form-field/"):
            assert key == "formFields", record_type
        else:
            assert key == expected.get(record_type, "annotations"), record_type
    for outside in ("xfdf/square", "acme/thing", None, 7, ["pspdfkit/comment"]):
        assert record_kind(outside) == record_kinds.ANNOTATION


def test_annotations_are_what_the_listings_and_permissions_call_annotations():
    assert is_annotation({"type": "pspdfkit/widget"}) and is_annotation({"type": "pspdfkit/comment-marker"})
    assert is_annotation(None) and is_annotation({}) and is_annotation({"type": "acme/thing"})
    for record_type in ("pspdfkit/comment", "pspdfkit/bookmark", "pspdfkit/form-field/radio",
                        "pspdfkit/form-field-value"):
        assert not is_annotation({"type": record_type}), record_type
    # the permissions' content types are read from the same kinds: widgets are form fields
    # there, bookmarks annotations (Instant's classification)
    for record_type in [*RECORDS, "xfdf/square", None]:
        kind = kind_of({"type": record_type})
        wanted = {"comment": "comments", "widget": "form-fields", "form-field": "form-fields",
                  "form-field-value": "form-fields"}.get(kind, "annotations")
        assert content_type_of(record_type) == wanted, record_type
