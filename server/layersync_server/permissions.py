"""Collaboration permissions (Instant's content ownership), free of the web framework: the
JWT claim's syntax, how a record is classified, and the one function every route asks
what a user may do with a record (docs/protocol.md, "Collaboration permissions").

The claim ``collaboration_permissions`` is an array of ``<content-type>:<action>:<scope>``
strings (:func:`parse_claim`). Without it a token has full access (``None`` here); with
it, what is not granted is denied, and creating needs the plain ``write`` permission.

Classification (:func:`content_type_of`), from the record kinds of
:mod:`layersync_server.record_kinds`: comments are ``comments`` records; form fields,
widgets and form field values are ``form-fields``; every other record (annotations,
comment markers, bookmarks, ``xfdf/*``, an application's own or a missing type) is
``annotations``, so no record escapes the claim.

Decisions (:func:`allows`): an action needs both the action and ``view`` granted for the
record (nobody edits what they cannot see). ``set-group`` is checked against the record
as it is and as it would be in the new group (Instant's ``set-group:group=X`` names the
groups a user may move records between). ``reply`` is checked against the thread's root
record; a record with a string ``rootId`` is a reply whatever its type, so creating one, or
an update that sets or changes ``rootId``, needs what a comment in that thread needs. Every
update needs ``edit`` (``fill`` for a form field value), even one that changes nothing, unless
it is a pure group change (``set-group``: content the same JSON as stored, by
:func:`~layersync_formats.values.same_json`, so ``false`` over ``0`` is a change). ``fill`` is judged by the value's form field (the
live ``pspdfkit/form-field/*`` record whose ``name`` the value's names: its ``createdBy`` and
``group``, as Instant scopes it; with ``view`` of the field, as every action needs), or by the
value itself when the layer has no such field; a
value created without ``group`` gets its field's group (:func:`default_group_of`). Deleting a root deletes its thread: the user needs
``delete`` on every live reply too, else the delete is refused as a whole, and the refusal
names a reply only when the user may view it (:func:`forbidden_change`).
"""

from __future__ import annotations

from dataclasses import dataclass

from layersync_server import record_kinds
from layersync_server.record_kinds import COMMENT_TYPE, FORM_FIELD_VALUE_TYPE as VALUE_TYPE
from layersync_formats.values import same_json

CONTENT_TYPES = ("annotations", "comments", "form-fields")
#: Actions each content type accepts (``*`` = all of them).
ACTIONS = {"annotations": ("view", "edit", "delete", "set-group"),
           "comments": ("view", "edit", "delete", "reply", "set-group"),
           "form-fields": ("view", "edit", "delete", "fill", "set-group")}
#: The claim's content type of each record kind (Instant's: widgets are form fields).
_CONTENT_TYPE_OF_KIND = {record_kinds.ANNOTATION: "annotations", record_kinds.BOOKMARK: "annotations",
                         record_kinds.COMMENT: "comments", record_kinds.WIDGET: "form-fields",
                         record_kinds.FORM_FIELD: "form-fields",
                         record_kinds.FORM_FIELD_VALUE: "form-fields"}


class ClaimError(ValueError):
    """A malformed claim; the message names the entry (the server answers 403 with it)."""


@dataclass(frozen=True)
class Scope:
    """Who a grant of one (content type, action) covers: every record (``all``), the
    user's own (``self``), records in ``groups``, records created by ``creators``."""

    all: bool = False
    self: bool = False
    groups: frozenset = frozenset()
    creators: frozenset = frozenset()

    def covers(self, created_by: str | None, group: str | None, user_id: str | None) -> bool:
        return (self.all or (self.self and user_id is not None and created_by == user_id)
                or (group is not None and group in self.groups)
                or (created_by is not None and created_by in self.creators))


_NOTHING = Scope()


@dataclass(frozen=True, eq=False)
class Permissions:
    """A parsed claim: ``scopes[(content_type, action)]`` (absent = nothing granted) and
    the entries as given (:attr:`entries`, what a reauthentication sends back)."""

    scopes: dict
    entries: tuple

    def scope(self, content_type: str, action: str) -> Scope:
        return self.scopes.get((content_type, action), _NOTHING)


def _parse_scope(entry: str, text: str) -> tuple[str, str | None]:
    if text in ("all", "self"):
        return text, None
    name, eq, value = text.partition("=")
    if eq and name in ("group", "createdBy") and value:
        return name, value
    raise ClaimError(f"collaboration_permissions entry {entry!r}: scope must be all, self, "
                     "group=<name> or createdBy=<user_id>")


def parse_claim(value: object) -> Permissions | None:
    """The ``collaboration_permissions`` claim parsed; ``None`` when absent (full access).

    Raises:
        ClaimError: not an array of strings, or an entry that is not
            ``<content-type>:<action>:<scope>`` with a known content type, an action of
            that content type (``reply`` only for comments, ``fill`` only for form
            fields) or ``*``, and a scope ``all``, ``self``, ``group=<name>``,
            ``createdBy=<user_id>`` (the message names the entry), or one that is not
            Unicode text (a lone surrogate, which the client's strings cannot hold).
    """
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(e, str) for e in value):
        raise ClaimError("claim collaboration_permissions must be an array of strings")
    grants: dict[tuple[str, str], dict] = {}
    for entry in value:
        try:  # a lone surrogate ("\ud800" in the JSON) is no Unicode text: clients cannot hold it
            entry.encode("utf-8")
        except UnicodeEncodeError:
            raise ClaimError(f"collaboration_permissions entry {entry!r}: not valid Unicode "
                             "(a lone surrogate)") from None
        parts = entry.split(":", 2)
        if len(parts) != 3:
            raise ClaimError(f"collaboration_permissions entry {entry!r}: expected "
                             "<content-type>:<action>:<scope>")
        content_type, action, scope_text = parts
        if content_type not in CONTENT_TYPES:
            raise ClaimError(f"collaboration_permissions entry {entry!r}: content type must be "
                             f"one of {', '.join(CONTENT_TYPES)}")
        allowed = ACTIONS[content_type]
        if action != "*" and action not in allowed:
            raise ClaimError(f"collaboration_permissions entry {entry!r}: action must be one of "
                             f"{', '.join(allowed)} or * for {content_type}")
        kind, name = _parse_scope(entry, scope_text)
        for one in (allowed if action == "*" else (action,)):
            acc = grants.setdefault((content_type, one), {"all": False, "self": False,
                                                          "groups": set(), "creators": set()})
            if kind == "group":
                acc["groups"].add(name)
            elif kind == "createdBy":
                acc["creators"].add(name)
            else:
                acc[kind] = True
    scopes = {key: Scope(acc["all"], acc["self"], frozenset(acc["groups"]),
                         frozenset(acc["creators"])) for key, acc in grants.items()}
    return Permissions(scopes, tuple(value))


def content_type_of(record_type: object) -> str:
    """The claim's content type of a record whose ``content.type`` is ``record_type``."""
    return _CONTENT_TYPE_OF_KIND[record_kinds.record_kind(record_type)]


def allows(permissions: Permissions | None, user_id: str | None, action: str,
           record_type: object, created_by: str | None, group: str | None) -> bool:
    """THE decision: may a user (``permissions`` of their token, ``user_id``) do
    ``action`` (view, edit, delete, reply, fill, set-group) to a record of
    ``content.type`` ``record_type`` created by ``created_by`` in ``group``? Every other
    action also needs ``view``. ``None`` permissions (no claim): always."""
    if permissions is None:
        return True
    content_type = content_type_of(record_type)
    if not permissions.scope(content_type, "view").covers(created_by, group, user_id):
        return False
    return action == "view" or permissions.scope(content_type, action).covers(created_by, group,
                                                                               user_id)


def _type(content: dict | None) -> object:
    return content.get("type") if content else None


def may(grant, action: str, record) -> bool:
    """:func:`allows` for a :class:`~layersync_server.storage.StoredRecord` (its
    ``content`` for the type; a tombstone classifies as ``annotations``) and a grant (an
    object with ``collaboration``, ``user_id``)."""
    if grant.collaboration is None:
        return True
    return allows(grant.collaboration, grant.user_id, action, _type(record.content),
                  record.created_by, record.group)


def may_view_wire(grant, wire: dict) -> bool:
    """:func:`allows` ``view`` for a record in its wire shape (``createdBy``, ``group``
    siblings); a tombstone (no ownership on the wire) is always sendable."""
    if grant.collaboration is None or wire.get("deleted"):
        return True
    return allows(grant.collaboration, grant.user_id, "view", _type(wire.get("content")),
                  wire.get("createdBy"), wire.get("group"))


def bare_tombstone(record_id: str, revision: int) -> dict:
    """What a client is sent for a record it may not view in a delta: the shape of a
    tombstone, nothing else (its local copy, if it has one, disappears)."""
    return {"id": record_id, "revision": revision, "deleted": True, "content": None}


def sent_as_delta(since: int) -> bool:
    """Whether a page of records past ``since`` goes out as a delta (a record the token may
    not view: a bare tombstone, so that a client that had it drops it) rather than as a
    snapshot (left out). At ``since`` 0 the client has applied nothing, so a bare tombstone
    could only tell it that a record it may not view exists: every page from 0 (records,
    changes, a sync answer, a change stream page) leaves them out, as the snapshot does."""
    return since > 0


def wire_records(grant, records: list, as_delta: bool) -> list[dict]:
    """The wire shapes of ``records`` for ``grant``: the records it may view as they are;
    the others as :func:`bare_tombstone` in a delta (``as_delta``), left out of a snapshot."""
    perms = grant.collaboration if grant is not None else None
    if perms is None:
        return [r.to_wire() for r in records]
    # :func:`may` ``view``, inlined (a page of thousands: ~1 us a record instead of ~3)
    views = {content_type: perms.scope(content_type, "view") for content_type in CONTENT_TYPES}
    if all(scope.all for scope in views.values()):
        return [r.to_wire() for r in records]
    user, kinds, out = grant.user_id, {}, []
    for record in records:
        if not record.deleted:
            record_type = record.content.get("type")
            scope = kinds.get(record_type) if type(record_type) is str else None
            if scope is None:
                scope = views[content_type_of(record_type)]
                if type(record_type) is str:
                    kinds[record_type] = scope
            if not (scope.all or scope.covers(record.created_by, record.group, user)):
                if as_delta:
                    out.append(bare_tombstone(record.id, record.revision))
                continue
        out.append(record.to_wire())
    return out


def root_id_of(content: dict | None) -> str | None:
    """The thread a record belongs to: its ``rootId`` when a string (whatever its type: such
    a record is a reply, and a root's delete takes it along), else None."""
    root_id = content.get("rootId") if content else None
    return root_id if isinstance(root_id, str) else None


def moves_thread(old_content: dict | None, new_content: dict | None) -> bool:
    """Whether an update sets or changes ``rootId`` (it then needs ``reply`` on the new
    thread, as creating a reply there does)."""
    new_root = root_id_of(new_content)
    return new_root is not None and new_root != root_id_of(old_content)


def _may_reply(grant, root) -> bool:
    """Whether ``grant`` may add a reply to the thread of ``root`` (None: no such live
    record): view of the root and ``reply`` matched against the root's ownership."""
    return (root is not None and not root.deleted and may(grant, "view", root)
            and allows(grant.collaboration, grant.user_id, "reply", COMMENT_TYPE, root.created_by,
                       root.group))


def value_field_name(content: dict | None) -> str | None:
    """The form field a form field value belongs to: its string ``name``, else None (also
    for a record that is no form field value)."""
    name = content.get("name") if content and content.get("type") == VALUE_TYPE else None
    return name if isinstance(name, str) else None


def default_group_of(grant, content: dict | None, field=None) -> str | None:
    """The group a create without ``group`` gets: a form field value's is its form field's
    (``field``, the live form field its ``name`` names; Instant: values inherit the field's
    group), anything else's (and a value whose field is not there) the token's
    ``default_group``."""
    if field is not None and _type(content) == VALUE_TYPE:
        return field.group
    return grant.default_group if grant is not None else None


def _may_fill(grant, field, created_by: str | None, group: str | None) -> bool:
    """``fill`` of a form field value: judged by its form field's ownership (``field``;
    Instant scopes ``fill`` by the field's group and creator), or, when the layer has no
    such field, by the value's own (``created_by``, ``group``). Through a field it is an
    action on the field, so :func:`allows` also needs ``view`` of the field: a field the
    token may not view fills no value, and is not taken for an absent one (the value would
    fill it in the export; docs/protocol.md, "A field the token may not view")."""
    if field is not None:
        return allows(grant.collaboration, grant.user_id, "fill", _type(field.content),
                      field.created_by, field.group)
    return allows(grant.collaboration, grant.user_id, "fill", VALUE_TYPE, created_by, group)


def forbidden_change(grant, op: str, current, content: dict | None, group: object,
                     group_given: bool, root=None, children=(), field=None,
                     new_field=None) -> str | None:
    """Why ``grant`` may not make this change, or None (it may). ``current``: the stored
    record (None for a create); ``content``: the new content (create/update); ``group``:
    the group the change asks for when ``group_given``; ``root``: for a reply (a comment,
    or any record with a ``rootId``: a create, or an update that :func:`moves_thread`), the
    thread's root record (None: not there; a reply needs to view the root and ``reply``
    matched against the root's ownership); ``children``: for a delete, the live replies
    the delete takes with it; ``field``: for a form field value, the live form field its
    :func:`value_field_name` names (a create: the new content's; an update: the stored
    one's), None when there is none (``fill`` is then judged by the value itself);
    ``new_field``: for an update that changes a value's name, the field of the new name
    (``fill`` is needed there too)."""
    if grant.collaboration is None:
        return None
    perms, user = grant.collaboration, grant.user_id
    new_type = _type(content)
    if op == "create":
        if "write" not in grant.permissions:
            return "token lacks the 'write' permission, which creating a record needs"
        inherited = default_group_of(grant, content, field)
        group_of_new = group if group_given else inherited
        if (new_type == COMMENT_TYPE or root_id_of(content) is not None) and not _may_reply(grant, root):
            return "may not reply to this thread"
        if new_type == VALUE_TYPE and not (_may_fill(grant, field, user, group_of_new) and allows(
                perms, user, "view", new_type, user, group_of_new)):
            return "may not fill this form field"
        if group_given and group != inherited and not allows(
                perms, user, "set-group", new_type, user, group):
            return f"may not create a record in {group_words(group)}"
        return None
    if not may(grant, "view", current):
        return "may not view this record"
    if op == "delete":
        if not may(grant, "delete", current):
            return "may not delete this record"
        for child in children:
            if not may(grant, "delete", child):
                if not may(grant, "view", child):  # its id must not leave the server
                    return "may not delete a reply of this thread that you may not view"
                return f"may not delete reply {child.id} of this thread"
        return None
    old_type = _type(current.content)
    changed = not same_json(content, current.content)  # type-aware: false is not 0
    group_change = group_given and group != current.group
    if changed or not group_change:  # every update but a pure group change, no-ops too
        if old_type == VALUE_TYPE:
            renamed = changed and value_field_name(content) != value_field_name(current.content)
            if not (_may_fill(grant, field, current.created_by, current.group) and (
                    not renamed or _may_fill(grant, new_field, current.created_by, current.group))):
                return "may not fill this record"
        elif not may(grant, "edit", current):
            return "may not edit this record"
    if changed:
        if content_type_of(new_type) != content_type_of(old_type) and not allows(
                perms, user, "edit", new_type, current.created_by, current.group):
            return "may not edit a record of that type"
        if moves_thread(current.content, content) and not _may_reply(grant, root):
            return "may not reply to this thread"
    if group_given and group != current.group and not (
            may(grant, "set-group", current)
            and allows(perms, user, "set-group", new_type, current.created_by, group)):
        return f"may not move this record to {group_words(group)}"
    return None


def group_words(group: str | None) -> str:
    """A group as the messages name it: ``group 'name'``, or ``no group`` for none (the
    client's mirror, ``CollaborationPermissions.groupWords``, writes the same)."""
    return "no group" if group is None else f"group '{group}'"


def regranted_records(storage, document_id: str, layer: str, up_to: int, grant,
                      previous: Permissions | None, previous_user_id: str | None) -> list[dict]:
    """What a reauthentication changes for records at revisions ``1..up_to`` (a client at
    ``since = up_to`` gets later ones in its delta, already filtered for ``grant``): the
    live records ``grant`` may view and the previous grant (``previous``,
    ``previous_user_id``) could not, whole, and bare tombstones of those the previous grant
    could view and ``grant`` cannot. Reads the layer's live records once (blocking)."""
    out = []
    if previous is None and grant.collaboration is None:
        return out
    for record in storage.iter_records(document_id, layer):
        if record.revision > up_to:
            break
        record_type = _type(record.content)
        was = allows(previous, previous_user_id, "view", record_type, record.created_by,
                     record.group)
        now = may(grant, "view", record)
        if now and not was:
            out.append(record.to_wire())
        elif was and not now:
            out.append(bare_tombstone(record.id, record.revision))
    return out
