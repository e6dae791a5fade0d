"""Which records are annotations, comments, bookmarks, form fields and form field values:
the one rule every listing, export and permission check reads (docs/protocol.md, "Record
kinds").

A layer holds records of every Instant JSON kind; Nutrient's Instant JSON (the vendor's
``InstantJson`` schema) files each kind under its own key, and Document Engine's
``.../annotations`` routes list only annotations:

=========================  =====================  ====================  ==================
``content.type``           kind                   Instant JSON key      listed as annotation
=========================  =====================  ====================  ==================
``pspdfkit/comment``       :data:`COMMENT`        ``comments``          no
``pspdfkit/bookmark``      :data:`BOOKMARK`       ``bookmarks``         no
``pspdfkit/form-field/*``  :data:`FORM_FIELD`     ``formFields``        no
``pspdfkit/form-field-     :data:`FORM_FIELD_     ``formFieldValues``   no
value``                    VALUE`
``pspdfkit/widget``        :data:`WIDGET`         ``annotations``       yes
anything else              :data:`ANNOTATION`     ``annotations``       yes
=========================  =====================  ====================  ==================

"Anything else" is every annotation type (comment markers included), ``xfdf/*`` records,
an application's own types and a record without a string type: nothing falls outside
the annotations, so nothing a layer holds is left out of an export. The collaboration
permissions' content types (:func:`layersync_server.permissions.content_type_of`) are
read from the same kinds.
"""

from __future__ import annotations

COMMENT_TYPE = "pspdfkit/comment"
BOOKMARK_TYPE = "pspdfkit/bookmark"
WIDGET_TYPE = "pspdfkit/widget"
FORM_FIELD_VALUE_TYPE = "pspdfkit/form-field-value"
#: ``pspdfkit/form-field/{text,checkbox,radio,button,combobox,listbox,signature}``.
FORM_FIELD_PREFIX = "pspdfkit/form-field/"

ANNOTATION = "annotation"
WIDGET = "widget"
COMMENT = "comment"
BOOKMARK = "bookmark"
FORM_FIELD = "form-field"
FORM_FIELD_VALUE = "form-field-value"

_BY_TYPE = {COMMENT_TYPE: COMMENT, BOOKMARK_TYPE: BOOKMARK, WIDGET_TYPE: WIDGET,
            FORM_FIELD_VALUE_TYPE: FORM_FIELD_VALUE}

#: The Instant JSON key (``document.json``) each kind is filed under.
INSTANT_JSON_KEYS = {ANNOTATION: "annotations", WIDGET: "annotations", COMMENT: "comments",
                     BOOKMARK: "bookmarks", FORM_FIELD: "formFields",
                     FORM_FIELD_VALUE: "formFieldValues"}


def record_kind(record_type: object) -> str:
    """The kind of a record whose ``content.type`` is ``record_type`` (table above)."""
    kind = _BY_TYPE.get(record_type) if type(record_type) is str else None
    if kind is not None:
        return kind
    if isinstance(record_type, str) and record_type.startswith(FORM_FIELD_PREFIX):
        return FORM_FIELD
    return ANNOTATION


def kind_of(content: dict | None) -> str:
    """:func:`record_kind` of a record's content (a tombstone's ``None`` is an annotation)."""
    return record_kind(content.get("type") if content else None)


def is_annotation(content: dict | None) -> bool:
    """Whether a record is an annotation (widgets included): what Document Engine's
    ``.../annotations`` and ``.../pages/{i}/annotations`` list and Instant JSON's
    ``annotations`` holds."""
    return kind_of(content) in (ANNOTATION, WIDGET)
