"""The protocol's conflict rules, written once against :class:`LayerWriter`.

Implements the table of docs/protocol.md ("POST .../sync"): first writer wins per
record, optimistic concurrency on ``base_revision``, change ids applied at most once
per layer (the first outcome is stored and replayed), tombstones, and the ``rootId``
cascade on delete.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from layersync_server.ids import all_valid_record_ids, is_valid_record_id
from layersync_server.record_schema import record_schema_problem
from layersync_server.storage.base import LayerWriter, StoredRecord
from layersync_server.wire_json import MAX_JSON_DEPTH, MAX_REVISION, BadNumber, json_problem

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
    ``id`` and ``v``)."""
    return content.get("id") == record_id and "v" in content


def _content_to_store(record_id: str, content: dict) -> dict:
    """:func:`normalize_content`, without the copy when nothing changes; the writer only
    reads it."""
    if _stored_as_sent(record_id, content):
        return content
    return normalize_content(record_id, content)


def _rejected(change: dict, reason: str, message: str, server: StoredRecord | None) -> dict:
    record_id = change.get("id")  # echoed only when valid: the outcome is stored as JSON
    return {"change_id": change["change_id"],
            "id": record_id if is_valid_record_id(record_id) else None, "reason": reason,
            "message": message, "server_record": server.to_wire() if server else None}


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
        content = change.get("content")
        if not isinstance(content, dict):
            return "content must be a JSON object"
        problem = None if content_ok else json_problem(content, MAX_JSON_DEPTH)
        if problem:  # depth, bad numbers, lone surrogates
            return problem
        problem = record_schema_problem(content)  # fields Instant JSON defines (docs/protocol.md)
        if problem:
            return problem
    if op in ("update", "delete"):
        base = change.get("base_revision")
        if isinstance(base, BadNumber):
            return f"base_revision: {base.why}"
        if not isinstance(base, int) or isinstance(base, bool) or not 0 <= base <= MAX_REVISION:
            return f"base_revision must be an integer 0..{MAX_REVISION}"
    return None


def _tombstone_with_children(writer: LayerWriter, record_id: str, user_id: str | None) -> int:
    """Tombstone a record, then every live record whose ``content.rootId`` is its id."""
    revision = writer.put_record(record_id, None, user_id)
    for child in writer.live_children(record_id):
        writer.put_record(child.id, None, user_id)
    return revision


def _stored_text(record_id: str, content: dict, text: str | None) -> str | None:
    """``text`` (the dump of ``content`` as sent) when it is also the dump of the
    content as stored, i.e. :func:`_content_to_store` keeps ``content`` as it is."""
    return text if text is not None and _stored_as_sent(record_id, content) else None


def _apply_one(writer: LayerWriter, change: dict, user_id: str | None,
               result: ApplyResult, content_ok: bool = False, text: str | None = None) -> dict:
    """Apply one validated-or-not change; return its outcome entry (not yet recorded).
    ``text``: the stored text of ``change["content"]`` as sent, if known."""
    problem = _validation_problem(change, content_ok)
    if problem:
        return _rejected(change, "invalid", problem, None)
    op, record_id = change["op"], change["id"]
    current = writer.get_record(record_id)

    if op == "create":
        if current is not None:
            return _rejected(change, "exists", f"record {record_id} already exists", current)
        content = change["content"]
        revision = writer.put_record(record_id, _content_to_store(record_id, content), user_id,
                                     _stored_text(record_id, content, text))
    elif current is None:
        return _rejected(change, "not_found", f"record {record_id} does not exist", None)
    elif current.deleted:
        if op == "delete":  # deleting a tombstone is accepted without a new revision
            return {"change_id": change["change_id"], "id": record_id, "revision": current.revision}
        return _rejected(change, "conflict",
                         f"record was deleted at revision {current.revision}", current)
    elif current.revision != change["base_revision"]:
        return _rejected(change, "conflict", f"record changed at revision {current.revision}", current)
    elif op == "update":
        content = change["content"]
        revision = writer.put_record(record_id, _content_to_store(record_id, content), user_id,
                                     _stored_text(record_id, content, text))
    else:
        revision = _tombstone_with_children(writer, record_id, user_id)
    result.own_revisions.add(revision)
    return {"change_id": change["change_id"], "id": record_id, "revision": revision}


def apply_changes(writer: LayerWriter, changes: list[dict], user_id: str | None,
                  checked: bool = False, content_texts: list | None = None) -> ApplyResult:
    """Apply ``changes`` in order inside ``writer``'s transaction.

    Each change must be a dict with a valid string ``change_id`` (the route checks the
    request shape). A change id already in the layer's log is not applied again; its
    stored outcome is returned as-is. A rejected change does not stop the others.

    ``checked``: every content already passes :func:`json_problem`: the changes hold
    no :class:`BadNumber` and no lone surrogate, and no content nests deeper than
    ``MAX_JSON_DEPTH`` (:func:`~layersync_server.wire_json.parse_json_checked` of the
    request body with ``MAX_JSON_DEPTH + 3`` levels said so).

    ``content_texts`` (only used with ``checked``): parallel to ``changes``, the
    ``dump_json`` text of each change's content as sent, or None
    (:func:`~layersync_server.wire_json.parse_sync_json`); the writer stores it
    instead of encoding the content again.

    Fast path: a create whose content is stored as sent, of a record the writer knows
    is absent, under a change id it knows is not logged (a batch of new records, after
    :meth:`LayerWriter.prefetch`), goes to :meth:`LayerWriter.accept_create` in one
    call; anything else (or when the writer can not tell) takes the general rules.
    Both give the same outcome (tests/test_push_fast_path.py).
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
    accepted, rejected, own = result.accepted, result.rejected, result.own_revisions
    accept_create = writer.accept_create
    for change, text in zip(changes, texts):
        change_id = change["change_id"]
        if text is not None and change.get("op") == "create":
            record_id = change.get("id")
            content = change["content"]  # an object: it has a text
            if _stored_as_sent(record_id, content) and (ids_valid or is_valid_record_id(record_id)) \
                    and record_schema_problem(content) is None:  # else rejected below
                root_id = content.get("rootId")
                revision = accept_create(change_id, record_id, text,
                                         root_id if isinstance(root_id, str) else None, user_id)
                if revision is not None:
                    own.add(revision)
                    accepted.append({"change_id": change_id, "id": record_id, "revision": revision})
                    continue
        outcome = writer.recorded_outcome(change_id)
        if outcome is None:
            outcome = _apply_one(writer, change, user_id, result, checked, text)
            writer.record_outcome(change_id, outcome)
        (rejected if "reason" in outcome else accepted).append(outcome)
    return result


def delete_record(writer: LayerWriter, record_id: str, user_id: str | None) -> int:
    """Tombstone a live record and its ``rootId`` children (admin API). Returns the revision."""
    return _tombstone_with_children(writer, record_id, user_id)
