"""Past versions under collaboration permissions (docs/protocol.md, "Collaboration
permissions", "What leaves the server"), on SQLite and PostgreSQL: each kept version is
shown only to users who may view that version (its own group and createdBy), in history,
rollback, restore and the deleted list; versions carry their ownership; ownership keys and
permission flags never enter a record's content; a page from since=0 (sync answer,
changes) leaves invisible records out as the snapshot does."""

from __future__ import annotations

import uuid

import pytest

from conftest import change, note, start_server, stop_server
from layersync_server.changes import apply_changes
from layersync_server.storage import NewDocument, open_storage
from layersync_server.storage.sql import SCHEMA_VERSION

LEAD = {"user_id": "lead", "collaboration_permissions": ["annotations:*:all", "comments:*:all"],
        "default_group": "public"}
GUEST = {"user_id": "guest", "default_group": "public",
         "collaboration_permissions": ["annotations:view:group=public", "comments:view:group=public"]}
#: may edit and bring back what is public (and only that)
EDITOR = {"user_id": "ed", "default_group": "public",
          "collaboration_permissions": ["annotations:view:group=public", "annotations:edit:group=public",
                                        "annotations:delete:group=public"]}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def srv(request, tmp_path_factory, keys):
    tmp = tmp_path_factory.mktemp("permhist")
    db = str(tmp / "db.sqlite") if request.param == "sqlite" else \
        request.getfixturevalue("pg_cluster").create_database("ph_" + uuid.uuid4().hex[:12])
    process, instance = start_server(tmp, db, *keys)
    instance.doc = instance.new_document()
    yield instance
    stop_server(process, instance)


def _sync(srv, layer, changes, since=10 ** 6, **claims):
    answer = srv.http.post(srv.layer_url(srv.doc, layer) + "/sync",
                           json={"epoch": None, "since": since, "changes": changes},
                           headers=srv.auth(srv.doc, layer, **claims))
    assert answer.status_code == 200, answer.text
    return answer.json()


def _grouped(op, record_id, content=None, base=None, group=None):
    entry = change(op, record_id, content, base)
    entry["group"] = group
    return entry


def _get(srv, layer, path, claims, **params):
    return srv.http.get(srv.layer_url(srv.doc, layer) + path, params=params,
                        headers=srv.auth(srv.doc, layer, **claims))


def _published_secret(srv):
    """The repro: the lead creates a private "SECRET internal plan", then publishes it
    with other text. ``(layer, revision of the secret, revision published)``."""
    layer = "hist-" + uuid.uuid4().hex[:8]
    made = _sync(srv, layer, [_grouped("create", "r", note("SECRET internal plan"), group="private")],
                 **LEAD)["accepted"][0]["revision"]
    published = _sync(srv, layer, [_grouped("update", "r", note("public text"), base=made,
                                            group="public")], **LEAD)["accepted"][0]["revision"]
    return layer, made, published


def _texts(versions):
    return [v["content"]["text"]["value"] if v["content"] else None for v in versions]


def test_history_leaves_out_the_versions_the_user_may_not_view(srv):
    layer, made, published = _published_secret(srv)
    guest = _get(srv, layer, "/records/r/history", GUEST)
    assert guest.status_code == 200, guest.text
    assert _texts(guest.json()["versions"]) == ["public text"]
    assert "SECRET" not in guest.text
    lead = _get(srv, layer, "/records/r/history", LEAD).json()["versions"]
    assert _texts(lead) == ["public text", "SECRET internal plan"]
    # once deleted: the deletion and the public version, never the secret one
    deleted = _sync(srv, layer, [change("delete", "r", base=published)], **LEAD)["accepted"][0]
    guest = _get(srv, layer, "/records/r/history", GUEST)
    assert [v["revision"] for v in guest.json()["versions"]] == [deleted["revision"], published]
    assert "SECRET" not in guest.text
    listed = _get(srv, layer, "/deleted", GUEST).json()["records"]
    assert [(r["id"], r["last_content"]["text"]["value"]) for r in listed] == [("r", "public text")]


def test_history_versions_carry_their_own_ownership(srv):
    layer, made, published = _published_secret(srv)
    _sync(srv, layer, [_grouped("update", "r", note("edited"), base=published, group="public")],
          user_id="ed", collaboration_permissions=EDITOR["collaboration_permissions"])
    versions = _get(srv, layer, "/records/r/history", LEAD).json()["versions"]
    assert [(v["createdBy"], v["updatedBy"], v["group"]) for v in versions] == [
        ("lead", "ed", "public"), ("lead", "lead", "public"), ("lead", "lead", "private")]
    current = _get(srv, layer, "/records", LEAD).json()["records"][0]
    assert {k: current[k] for k in ("createdBy", "updatedBy", "group")} == \
        {k: versions[0][k] for k in ("createdBy", "updatedBy", "group")}


def test_rollback_and_restore_never_write_back_a_version_the_user_may_not_view(srv):
    layer, made, published = _published_secret(srv)
    url = srv.layer_url(srv.doc, layer)
    editor = srv.auth(srv.doc, layer, **EDITOR)
    hidden = srv.http.post(f"{url}/records/r/rollback", json={"revision": made}, headers=editor)
    assert hidden.status_code == 404 and "SECRET" not in hidden.text, hidden.text
    assert _texts(_get(srv, layer, "/records", LEAD).json()["records"]) == ["public text"]
    # a record whose last live version is private, deleted after a move to public as a tombstone
    layer2 = "hist-" + uuid.uuid4().hex[:8]
    rev = _sync(srv, layer2, [_grouped("create", "p", note("public first"), group="public")],
                **LEAD)["accepted"][0]["revision"]
    rev = _sync(srv, layer2, [_grouped("update", "p", note("SECRET again"), base=rev, group="private")],
                **LEAD)["accepted"][0]["revision"]
    rev = _sync(srv, layer2, [_grouped("update", "p", note("SECRET again"), base=rev, group="public")],
                **LEAD)["accepted"][0]["revision"]
    groups = [v["group"] for v in _get(srv, layer2, "/records/p/history", LEAD).json()["versions"]]
    assert groups == ["public", "private", "public"]  # each version with its group
    url2 = srv.layer_url(srv.doc, layer2)
    editor2 = srv.auth(srv.doc, layer2, **EDITOR)
    back = srv.http.post(f"{url2}/records/p/rollback", json={"revision": rev - 1}, headers=editor2)
    assert back.status_code == 404 and "SECRET" not in back.text, back.text
    ok = srv.http.post(f"{url2}/records/p/rollback", json={"revision": rev - 2}, headers=editor2)
    assert ok.status_code == 200 and ok.json()["record"]["content"]["text"]["value"] == "public first"


def test_ownership_keys_in_content_are_never_stored(srv):
    layer = "keys-" + uuid.uuid4().hex[:8]
    sneaky = note("mine", createdBy="lead", updatedBy="lead", group="private", isEditable=True,
                  isDeletable=True, canReply=True, isFillable=True, canSetGroup=True)
    rev = _sync(srv, layer, [change("create", "b1", sneaky)], user_id="bob")["accepted"][0]["revision"]
    _sync(srv, layer, [change("create", "b2", sneaky), change("update", "b1", sneaky, base=rev)],
          user_id="bob")
    url = f"/api/documents/{srv.doc}/layers/{layer}/annotations"
    created = srv.http.post(url, json={"id": "adm", "content": sneaky, "user_id": "bob"},
                            headers=srv.admin())
    assert created.status_code == 200, created.text
    for record in _get(srv, layer, "/records", {}).json()["records"]:
        assert record["createdBy"] == "bob" and record["group"] is None, record
        assert not set(record["content"]) & {"createdBy", "updatedBy", "group", "isEditable",
                                             "isDeletable", "canReply", "isFillable", "canSetGroup"}
        assert record["content"]["text"]["value"] == "mine"
    assert "lead" not in created.text


def test_a_page_from_since_0_leaves_invisible_records_out(srv):
    layer = "zero-" + uuid.uuid4().hex[:8]
    _sync(srv, layer, [_grouped("create", "pub", note("q"), group="public"),
                       _grouped("create", "priv", note("p"), group="private")], **LEAD)
    answer = _sync(srv, layer, [], since=0, **GUEST)
    assert [r["id"] for r in answer["changes"]] == ["pub"]
    polled = _get(srv, layer, "/changes", GUEST, since=0, wait=0).json()["records"]
    assert [r["id"] for r in polled] == ["pub"]
    snapshot = _get(srv, layer, "/records", GUEST, since=0).json()["records"]
    assert [r["id"] for r in snapshot] == ["pub"]
    # a delta still sends the bare tombstone (a client that had it drops it)
    bare = {"id": "priv", "revision": 2, "deleted": True, "content": None}
    assert _sync(srv, layer, [], since=1, **GUEST)["changes"] == [bare]
    assert _get(srv, layer, "/changes", GUEST, since=1, wait=0).json()["records"] == [bare]


def test_a_record_the_user_may_not_view_answers_as_an_unknown_id_on_every_route(srv):
    """No existence oracle: an update, delete, history, rollback, restore or attachment read
    of a record the token may not view gets exactly the answer of an id that never existed
    (status, error code or rejection reason, message with the id, no server record)."""
    import hashlib
    layer = "oracle-" + uuid.uuid4().hex[:8]
    data = b"private attachment " + uuid.uuid4().bytes
    sha = hashlib.sha256(data).hexdigest()
    put = srv.http.put(f"/sync/v1/documents/{srv.doc}/attachments/{sha}", content=data,
                       headers=srv.auth(srv.doc, None, **LEAD))
    assert put.status_code in (200, 201), put.text
    image = {"v": 2, "type": "pspdfkit/image", "pageIndex": 0, "bbox": [0, 0, 10, 10],
             "imageAttachmentId": sha, "contentType": "image/png",
             "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z"}
    made = _sync(srv, layer, [_grouped("create", "priv", note("SECRET"), group="private"),
                              _grouped("create", "img", image, group="private"),
                              _grouped("create", "gone", note("SECRET gone"), group="private")],
                 **LEAD)["accepted"]
    revision = {a["id"]: a["revision"] for a in made}
    _sync(srv, layer, [change("delete", "gone", base=revision["gone"])], **LEAD)
    url = srv.layer_url(srv.doc, layer)
    editor = srv.auth(srv.doc, layer, **EDITOR)

    def same(hidden: str, unknown: str, answer_of) -> None:
        got, want = answer_of(hidden), answer_of(unknown)
        assert got == want.replace(unknown, hidden), (got, want)
        assert "SECRET" not in got and "private" not in got

    def sync_answer(op: str):
        def answer_of(record_id: str) -> str:
            sent = change(op, record_id, note("x") if op == "update" else None,
                          base=revision.get(record_id, 1))
            answer = _sync(srv, layer, [sent], since=10 ** 6, **EDITOR)
            assert not answer["accepted"], answer
            return repr([{k: v for k, v in r.items() if k != "change_id"} for r in answer["rejected"]])
        return answer_of

    def route(method: str, path: str, body: dict | None = None):
        def answer_of(record_id: str) -> str:
            response = srv.http.request(method, f"{url}/records/{record_id}{path}", json=body,
                                        headers=editor)
            assert response.status_code == 404, response.text
            return f"{response.status_code} {response.text}"
        return answer_of

    unknown = "never-" + uuid.uuid4().hex[:8]
    for op in ("update", "delete"):
        same("priv", unknown, sync_answer(op))
    assert "not_found" in sync_answer("update")("priv")
    for hidden in ("priv", "gone"):
        same(hidden, unknown, route("GET", "/history"))
        same(hidden, unknown, route("POST", "/rollback", {"revision": 1}))
        same(hidden, unknown, route("POST", "/restore", {}))
    unknown_sha = hashlib.sha256(b"no such bytes " + uuid.uuid4().bytes).hexdigest()

    def attachment(digest: str) -> str:
        response = srv.http.get(f"/sync/v1/documents/{srv.doc}/attachments/{digest}",
                                headers=srv.auth(srv.doc, layer, **EDITOR))
        return f"{response.status_code} {response.text}"
    same(sha, unknown_sha, attachment)
    assert attachment(sha).startswith("404")


# -- storage: versions kept before schema 6 -------------------------------------------------

@pytest.fixture(params=["sqlite", "postgres"])
def storage(request, tmp_path):
    target = (tmp_path / "store.sqlite" if request.param == "sqlite"
              else request.getfixturevalue("pg_url"))
    backend = open_storage(target)
    backend.create_document(NewDocument("d", "Doc", b"%PDF-1.4 fake", "00" * 32, 1, []))
    yield backend
    backend.close()


def test_versions_kept_before_schema_6_get_their_creator_and_no_group(storage):
    with storage.write_layer("d", "") as writer:
        writer.put_record("r", note("secret"), "lead", group="private")
    with storage.write_layer("d", "") as writer:
        writer.put_record("r", note("public"), "ed", group="public")
    with storage.transaction(write=True) as conn:  # what schema 5 kept: no ownership
        storage.execute(conn, "UPDATE record_versions SET created_by=NULL, group_name=NULL")
        if hasattr(storage, "path"):
            storage.execute(conn, "PRAGMA user_version=5")
        else:
            storage.execute(conn, "DELETE FROM layersync_schema WHERE version > 5")
    storage.migrate()
    with storage.transaction(write=False) as conn:
        assert storage.schema_version(conn) == SCHEMA_VERSION == 6
    versions = storage.record_history("d", "", "r")
    assert [(v.created_by, v.updated_by, v.group) for v in versions] == [
        ("lead", "ed", "public"), ("lead", "lead", None)]


def test_a_version_of_unknown_group_is_shown_only_to_a_grant_that_needs_no_group():
    from dataclasses import dataclass

    from layersync_server.permissions import parse_claim
    from layersync_server.routes.sync import visible_versions
    from layersync_server.storage.base import StoredRecord

    @dataclass
    class G:
        collaboration: object
        user_id: str

    old = StoredRecord("r", 1, False, note("old"), "lead", "lead", group=None)
    new = StoredRecord("r", 2, False, note("new"), "lead", "ed", group="public")
    for claim, user, shown in ((["annotations:view:group=public"], "guest", [2]),
                               (["annotations:view:all"], "guest", [2, 1]),
                               (["annotations:view:self"], "lead", [2, 1]),
                               (["annotations:view:createdBy=lead"], "x", [2, 1])):
        got = visible_versions(G(parse_claim(claim), user), [new, old])
        assert [v.revision for v in got] == shown, claim


def test_apply_changes_strips_ownership_keys_on_the_fast_path_too(storage):
    with storage.write_layer("d", "") as writer:
        result = apply_changes(writer, [change("create", f"n{i}", note("x", createdBy="lead"))
                                        for i in range(3)], "bob")
    assert len(result.accepted) == 3
    for i in range(3):
        record = storage.get_record("d", "", f"n{i}")
        assert record.created_by == "bob" and "createdBy" not in record.content
