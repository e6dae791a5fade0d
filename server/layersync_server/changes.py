"""The protocol's sync rules, written once against :class:`LayerWriter`, free of the
web framework.

Implements the table of docs/protocol.md ("POST .../sync"): the request envelope and its
change ids (:func:`parse_sync_request`, the one place they are validated), the epoch
check and the answer's page read in the push's transaction (:func:`push`,
:func:`sync_answer`), first writer wins per record, optimistic concurrency on
``base_revision``, change ids applied at most once per layer (the first outcome is
stored and replayed), tombstones, and the ``rootId`` cascade on delete.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from layersync_server.errors import invalid_request
from layersync_server.ids import all_valid_record_ids, is_valid_record_id
from layersync_server.permissions import (default_group_of, forbidden_change, may, may_view_wire,
                                          moves_thread, root_id_of, sent_as_delta, value_field_name,
                                          wire_records)
from layersync_server.record_kinds import ANNOTATION, COMMENT, COMMENT_TYPE, kind_of
from layersync_server.record_kinds import FORM_FIELD_VALUE_TYPE as VALUE_TYPE
from layersync_formats.record_schema import record_schema_problem
from layersync_server.storage.base import (KEEP_GROUP, LayerState, LayerWriter, RecordPage,
                                           StoredRecord, WriteWouldWait, has_handed_out_keys)
from layersync_server.wire_json import (MAX_JSON_DEPTH, MAX_REVISION, BadNumber, json_problem,
                                        parse_sync_json)

OPS = ("create", "update", "delete")


@dataclass
class ApplyResult:
    """Outcome of a batch.

    ``accepted``: ``{"change_id", "id", "revision"}`` entries; ``rejected``:
    ``{"change_id", "id", "reason", "message", "server_record"}`` entries, both in
    request order. ``own_revisions``: revisions written for the changed records
    themselves (left out of the response's ``changes``); cascade tombstones are not in it.
    """

    accepted: list[dict] = field(default_factory=list)
    rejected: list[dict] = field(default_factory=list)
    own_revisions: set[int] = field(default_factory=set)

    @property
    def wrote(self) -> bool:
        """True when the batch created at least one revision."""
        return bool(self.own_revisions)


def normalize_content(record_id: str, content: dict) -> dict:
    """Return content with ``id`` set to ``record_id`` and ``v`` defaulted to 2."""
    normalized = dict(content)
    normalized["id"] = record_id
    normalized.setdefault("v", 2)
    return normalized


def _stored_as_sent(record_id: str, content: dict) -> bool:
    """Whether :func:`normalize_content` would leave ``content`` as it is (clients send
    ``id`` and ``v``) and storage would too (no :data:`HANDED_OUT_KEYS`, which it drops)."""
    return content.get("id") == record_id and "v" in content and not has_handed_out_keys(content)


def _content_to_store(record_id: str, content: dict) -> dict:
    """:func:`normalize_content`, without the copy when nothing changes; the writer only
    reads it."""
    return _to_store(record_id, content, None)[0]


def _to_store(record_id: str, content: dict, text: str | None) -> tuple[dict, str | None]:
    """``(content as stored, its text)``: :func:`_content_to_store`, and ``text`` (the
    dump of ``content`` as sent, or None) when it is also the dump of the stored content,
    i.e. nothing changes; else None (the writer encodes it)."""
    if _stored_as_sent(record_id, content):
        return content, text
    return normalize_content(record_id, content), None


#: A change without a ``group`` sibling (it keeps the record's; a create gets the default).
_NO_GROUP = object()


def _group_of(change: dict) -> object:
    """The change's ``group`` sibling: a string, None, or :data:`_NO_GROUP`."""
    return change.get("group", _NO_GROUP)


def _rejected(change: dict, reason: str, message: str, server: StoredRecord | None) -> dict:
    record_id = change.get("id")  # echoed only when valid: the outcome is stored as JSON
    return {"change_id": change["change_id"],
            "id": record_id if is_valid_record_id(record_id) else None, "reason": reason,
            "message": message, "server_record": server.to_wire() if server else None}


def content_problem(content: object, content_ok: bool = False) -> str | None:
    """Why ``content`` may not be a record's content, or None: it must be a JSON object
    within :data:`MAX_JSON_DEPTH` without bad numbers or lone surrogates (``content_ok``:
    known already) that passes the record schema (docs/protocol.md, "Record schema").
    Every write of a client's content checks it: sync changes, rollback and restore."""
    if not isinstance(content, dict):
        return "content must be a JSON object"
    problem = None if content_ok else json_problem(content, MAX_JSON_DEPTH)
    if problem:  # depth, bad numbers, lone surrogates
        return problem
    return record_schema_problem(content)  # fields Instant JSON defines


def _validation_problem(change: dict, content_ok: bool = False) -> str | None:
    """Why a change is ``invalid``, or None. ``change_id`` was checked by the caller;
    ``content_ok``: a dict ``content`` is known to pass :func:`json_problem`."""
    op = change.get("op")
    if op not in OPS:
        return f"op must be one of {', '.join(OPS)}"
    if not is_valid_record_id(change.get("id")):
        return ("id must be a string of 1..128 characters without control characters "
                "or lone surrogates")
    if op in ("create", "update"):
        problem = content_problem(change.get("content"), content_ok)
        if problem:
            return problem
    group = _group_of(change)
    if group is not _NO_GROUP and group is not None and not isinstance(group, str):
        return "group must be a string or null"
    if op in ("update", "delete"):
        base = change.get("base_revision")
        if isinstance(base, BadNumber):
            return f"base_revision: {base.why}"
        if not isinstance(base, int) or isinstance(base, bool) or not 0 <= base <= MAX_REVISION:
            return f"base_revision must be an integer 0..{MAX_REVISION}"
    return None


def _tombstone_with_children(writer: LayerWriter, record_id: str, user_id: str | None,
                             children: list | None = None) -> int:
    """Tombstone a record, then every live record whose ``content.rootId`` is its id
    (``children``, when the caller read them already)."""
    revision = writer.put_record(record_id, None, user_id)
    for child in writer.live_children(record_id) if children is None else children:
        writer.put_record(child.id, None, user_id)
    return revision


def _forced_creator(grant, content: dict) -> dict:
    """``content`` with ``creatorName`` forced to the token's ``creator_name`` (an
    annotation or comment; form fields and bookmarks have no author)."""
    name = grant.creator_name if grant is not None else None
    if (name is None or content.get("creatorName") == name
            or kind_of(content) not in (ANNOTATION, COMMENT)):
        return content
    return {**content, "creatorName": name}


def _kept_creator(grant, current: StoredRecord, content: dict) -> dict:
    """``content`` of an update with ``creatorName`` kept as stored when the token has a
    ``creator_name`` (an annotation or comment): the name says who created the record, and
    nobody signs it for someone else by editing it."""
    if grant is None or grant.creator_name is None or kind_of(content) not in (ANNOTATION, COMMENT):
        return content
    stored = (current.content or {}).get("creatorName")
    if content.get("creatorName") == stored and ("creatorName" in content) == (stored is not None):
        return content
    kept = {key: value for key, value in content.items() if key != "creatorName"}
    if stored is not None:
        kept["creatorName"] = stored
    return kept


def _forbidden(change: dict, message: str, current: StoredRecord | None, grant) -> dict:
    """A ``forbidden`` rejection: the server's version when the user may view it (the
    local copy reverts to it), else none."""
    visible = current is not None and may(grant, "view", current)
    return _rejected(change, "forbidden", message, current if visible else None)


def _forbidden_update_or_delete(writer: LayerWriter, grant, op: str, current: StoredRecord,
                                change: dict, group: object, given: bool) -> str | None:
    """:func:`forbidden_change` of an update (its content as it would be stored, with
    ``creatorName`` kept, and the new thread's root when it :func:`moves_thread`) or a
    delete (with the live replies it takes)."""
    if op == "delete":
        return forbidden_change(grant, op, current, None, group, given,
                                children=writer.live_children(current.id))
    content = _content_to_store(current.id, _kept_creator(grant, current, change["content"]))
    return forbidden_update(writer, grant, current, content, group, given)


def forbidden_update(writer: LayerWriter, grant, current: StoredRecord, content: dict,
                     group: object = None, given: bool = False) -> str | None:
    """:func:`forbidden_change` of an update of ``current`` to ``content`` (as it would be
    stored), with what it reads from the layer: the new thread's root when it
    :func:`moves_thread`, a form field value's form field (and the new name's, when it
    changes)."""
    root = None
    if moves_thread(current.content, content):
        root = writer.get_record(root_id_of(content))
    name, new_name = value_field_name(current.content), value_field_name(content)
    field = _field_named(writer, name)
    new_field = field if new_name == name else _field_named(writer, new_name)
    return forbidden_change(grant, "update", current, content, group, given, root=root,
                            field=field, new_field=new_field)


def _field_named(writer: LayerWriter, name: str | None) -> StoredRecord | None:
    """The live form field a value's ``name`` names (None: no name, or no such field)."""
    return writer.form_field(name) if name is not None else None


def _apply_one(writer: LayerWriter, change: dict, user_id: str | None,
               result: ApplyResult, content_ok: bool = False, text: str | None = None,
               grant=None) -> dict:
    """Apply one validated-or-not change; return its outcome entry (not yet recorded).
    ``text``: the stored text of ``change["content"]`` as sent, if known. ``grant``: the
    token's (its collaboration permissions, default group and creator name), or None
    (full access, no defaults: the admin API and the tests of the rules)."""
    problem = _validation_problem(change, content_ok)
    if problem:
        return _rejected(change, "invalid", problem, None)
    op, record_id = change["op"], change["id"]
    current = writer.get_record(record_id)
    group = _group_of(change)
    given = group is not _NO_GROUP
    checked = grant is not None and grant.collaboration is not None

    if op == "create":
        if current is not None:
            return _rejected(change, "exists", f"record {record_id} already exists", current)
        content = change["content"]
        # a value's form field: fill is judged by it, and the value gets its group
        field = _field_named(writer, value_field_name(content)) if grant is not None else None
        if checked:
            root_id = root_id_of(content)
            root = writer.get_record(root_id) if root_id is not None else None
            why = forbidden_change(grant, "create", None, content, group, given, root=root,
                                   field=field)
            if why:
                return _forbidden(change, why, None, grant)
        forced = _forced_creator(grant, content)
        if forced is not content:
            content, text = forced, None
        if not given:
            group = default_group_of(grant, content, field)
        content, text = _to_store(record_id, content, text)
        revision = writer.put_record(record_id, content, user_id, text, group)
    elif current is None or (checked and not current.deleted and not may(grant, "view", current)):
        # a live record the token may not view is as if absent: the answer of an unknown id,
        # so that an update or delete cannot tell that the id exists (an oracle otherwise)
        return _rejected(change, "not_found", f"record {record_id} does not exist", None)
    elif current.deleted:
        if op == "delete":  # deleting a tombstone is accepted without a new revision
            return {"change_id": change["change_id"], "id": record_id, "revision": current.revision}
        return _rejected(change, "conflict",
                         f"record was deleted at revision {current.revision}", current)
    elif checked and (why := _forbidden_update_or_delete(writer, grant, op, current, change, group,
                                                          given)):
        return _forbidden(change, why, current, grant)
    elif current.revision != change["base_revision"]:
        return _rejected(change, "conflict", f"record changed at revision {current.revision}", current)
    elif op == "update":
        content = _kept_creator(grant, current, change["content"])
        if content is not change["content"]:
            text = None
        content, text = _to_store(record_id, content, text)
        revision = writer.put_record(record_id, content, user_id, text,
                                     group if given else KEEP_GROUP)
    else:
        revision = _tombstone_with_children(writer, record_id, user_id)
    result.own_revisions.add(revision)
    return {"change_id": change["change_id"], "id": record_id, "revision": revision}


def apply_changes(writer: LayerWriter, changes: list[dict], user_id: str | None,
                  checked: bool = False, content_texts: list | None = None,
                  grant=None) -> ApplyResult:
    """Apply ``changes`` in order inside ``writer``'s transaction.

    Each change must be a dict with a valid string ``change_id``
    (:func:`parse_sync_request` checks it). A change id already in the layer's log is not applied again; its
    stored outcome is returned as-is. A rejected change does not stop the others.

    ``checked``: every content already passes :func:`json_problem`: the changes hold
    no :class:`BadNumber` and no lone surrogate, and no content nests deeper than
    ``MAX_JSON_DEPTH`` (:func:`~layersync_server.wire_json.parse_json_checked` of the
    request body with ``MAX_JSON_DEPTH + 3`` levels said so).

    ``content_texts`` (only used with ``checked``): parallel to ``changes``, the
    ``dump_json`` text of each change's content as sent, or None
    (:func:`~layersync_server.wire_json.parse_sync_json`); the writer stores it
    instead of encoding the content again.

    ``grant``: the token's :class:`~layersync_server.auth.Grant`: its collaboration
    permissions reject a change alone as ``forbidden``, its ``default_group`` and
    ``creator_name`` stamp new records (:mod:`layersync_server.permissions`).
    """
    result = ApplyResult()
    record_ids = [c.get("id") for c in changes]
    ids_valid = all_valid_record_ids(record_ids)  # else checked one by one
    writer.prefetch(record_ids if ids_valid else [i for i in record_ids if is_valid_record_id(i)],
                    [c["change_id"] for c in changes])
    texts = content_texts if checked and content_texts is not None else None
    if texts is None:
        texts = itertools.repeat(None)
    elif len(texts) != len(changes):
        raise ValueError("content_texts must be parallel to changes")
    accepted, rejected = result.accepted, result.rejected
    recorded, record = writer.recorded_outcome, writer.record_outcome
    for change, text in zip(changes, texts):
        change_id = change["change_id"]
        outcome = recorded(change_id)
        if outcome is None:
            outcome = _apply_one(writer, change, user_id, result, checked, text, grant)
            record(change_id, outcome)
        (rejected if "reason" in outcome else accepted).append(outcome)
    return result


def delete_record(writer: LayerWriter, record_id: str, user_id: str | None) -> int:
    """Tombstone a live record and its ``rootId`` children (admin API). Returns the revision."""
    return _tombstone_with_children(writer, record_id, user_id)


# -- the sync request and its answer --------------------------------------------------------

@dataclass
class SyncRequest:
    """A ``POST .../sync`` body whose envelope passed :func:`parse_sync_request`.

    ``changes``: dicts, each with a valid ``change_id`` (what :func:`apply_changes`
    needs); per-change problems (bad numbers, too deep content, bad ids...) are left to
    the rules, which reject that change only. ``checked``: the parse found no bad number
    or lone surrogate anywhere and no nesting past ``MAX_JSON_DEPTH + 3`` (body,
    ``changes``, change, then the content, whose levels count from 1): every content
    passes ``json_problem`` already. ``content_texts``: the stored text of each
    change's content, or None (:func:`~layersync_server.wire_json.parse_sync_json`).
    """

    epoch: str | None
    since: int
    changes: list[dict]
    checked: bool
    content_texts: list | None
    client_id: str | None


def is_revision(value: object) -> bool:
    """Whether ``value`` is a revision number: an integer 0..``MAX_REVISION``."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REVISION


def parse_sync_request(raw: bytes) -> SyncRequest:
    """Parse and validate a sync request body's envelope.

    Raises:
        ApiError: 400 ``invalid_request`` when the body is not JSON, not an object, or
            ``epoch``, ``since``, ``changes`` or a change's ``change_id`` is malformed
            (``details.index`` names the first bad change).
    """
    body, checked, texts = parse_sync_json(raw, MAX_JSON_DEPTH)
    if not isinstance(body, dict):
        raise invalid_request("body must be a JSON object")
    epoch, since = body.get("epoch"), body.get("since", 0)
    changes = body.get("changes", [])
    if epoch is not None and not isinstance(epoch, str):
        raise invalid_request("epoch must be a string or null")
    if not is_revision(since):
        raise invalid_request(f"since must be an integer 0..{MAX_REVISION}")
    if not isinstance(changes, list):
        raise invalid_request("changes must be an array")
    if not (all(type(change) is dict for change in changes)
            and all_valid_record_ids([change.get("change_id") for change in changes])):
        _check_change_ids(changes)  # finds the first bad one
    client_id = body.get("client_id")
    return SyncRequest(epoch, since, changes, checked, texts,
                       client_id if isinstance(client_id, str) else None)


def _check_change_ids(changes: list) -> None:
    """400 for the first change that is not an object with a valid ``change_id``."""
    for index, change in enumerate(changes):
        if not isinstance(change, dict) or not is_valid_record_id(change.get("change_id")):
            raise invalid_request(f"changes[{index}] needs a string change_id of 1..128 characters "
                                  "without control characters or lone surrogates", index=index)


def push(writer: LayerWriter, request: SyncRequest, user_id: str | None, page_size: int,
         inline_max_records: int | None = None, grant=None) -> tuple[ApplyResult, RecordPage] | None:
    """The push of ``request`` in ``writer``'s transaction: None when the client's epoch
    is not the layer's (nothing applied: the client resets, docs/protocol.md), else the
    :class:`ApplyResult` and the answer's page (:func:`answer_page`), read in the same
    transaction (no second query or thread hop)."""
    if request.epoch is not None and request.epoch != writer.layer.epoch:
        return None
    result = apply_changes(writer, request.changes, user_id, request.checked,
                           request.content_texts, grant)
    return result, answer_page(writer, request.since, page_size,
                               frozenset(result.own_revisions), inline_max_records)


def answer_page(writer: LayerWriter, since: int, limit: int, exclude: frozenset[int],
                inline_max_records: int | None = None) -> RecordPage:
    """The push answer's page: ``writer.changes_since(since, limit, exclude)``.

    ``inline_max_records``: the push runs on the event loop thread (the caller's
    choice), which must read at most that many records: a client that is behind may be
    owed a whole page, which is read in a worker instead (:class:`WriteWouldWait` makes
    the caller roll back and run the push again there), so the answer is the same and
    the loop never reads a large page."""
    if inline_max_records is not None and limit > inline_max_records:
        page = writer.changes_since(since, inline_max_records, exclude)
        if page.has_more:
            raise WriteWouldWait()
        return page  # all of them: the same page as with ``limit``
    return writer.changes_since(since, limit, exclude)


def sync_answer(layer: LayerState,
                pushed: tuple[ApplyResult, RecordPage] | None, grant=None,
                since: int | None = None) -> dict:
    """The answer's body for :func:`push`'s result and the layer state after the commit;
    ``grant``'s collaboration permissions filter the server changes (past the request's
    ``since``: a delta, or from 0 as a snapshot, :func:`sent_as_delta`) and the
    rejections' server records (replayed outcomes were stored for whoever sent them)."""
    if pushed is None:
        return {"epoch": layer.epoch, "revision": layer.revision, "accepted": [],
                "rejected": [], "changes": [], "has_more": False, "next_since": 0,
                "epoch_changed": True}
    result, page = pushed
    rejected = result.rejected
    if grant is not None and grant.collaboration is not None and rejected:
        rejected = [r if r.get("server_record") is None or may_view_wire(grant, r["server_record"])
                    else {**r, "server_record": None} for r in rejected]
    return {"epoch": page.layer.epoch, "revision": page.layer.revision,
            "accepted": result.accepted, "rejected": rejected,
            "changes": wire_records(grant, page.records, since is None or sent_as_delta(since)),
            "has_more": page.has_more, "next_since": page.next_since, "epoch_changed": False}
