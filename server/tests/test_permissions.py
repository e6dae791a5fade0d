"""Collaboration permissions (docs/protocol.md, "Collaboration permissions"), end to end
on a real server over loopback, on SQLite and PostgreSQL: the claim's syntax (a malformed
entry is 403 naming it), ownership on the wire, the permission matrix content type x
action x scope, a forbidden change alone in a batch of 1,000, group changes, and the
records a reauthentication with wider or narrower grants makes appear and disappear."""

from __future__ import annotations

import json
import uuid

import pytest

from conftest import change, note, start_server, stop_server
from layersync_server.permissions import ClaimError, allows, content_type_of, parse_claim


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def srv(request, tmp_path_factory, keys):
    """A server of its own per backend."""
    tmp = tmp_path_factory.mktemp("perm")
    db = str(tmp / "db.sqlite") if request.param == "sqlite" else \
        request.getfixturevalue("pg_cluster").create_database("perm_" + uuid.uuid4().hex[:12])
    process, instance = start_server(tmp, db, *keys, "--max-request-bytes", "4000000")
    instance.doc = instance.new_document()
    yield instance
    stop_server(process, instance)


def comment(root_id: str, text: str = "reply") -> dict:
    return {"v": 2, "type": "pspdfkit/comment", "rootId": root_id, "pageIndex": 0,
            "text": {"format": "plain", "value": text},
            "createdAt": "2025-01-02T00:00:00Z", "updatedAt": "2025-01-02T00:00:00Z"}


def widget(name: str = "f1") -> dict:
    return {"v": 2, "type": "pspdfkit/widget", "pageIndex": 0, "bbox": [0, 0, 10, 10],
            "formFieldName": name}


def value(name: str = "f1", text: str = "x") -> dict:
    return {"v": 1, "type": "pspdfkit/form-field-value", "name": name, "value": text}


def sync(srv, layer: str, changes: list, since: int = 0, **claims):
    response = srv.http.post(srv.layer_url(srv.doc, layer) + "/sync",
                             json={"epoch": None, "since": since, "changes": changes},
                             headers=srv.auth(srv.doc, layer, **claims))
    assert response.status_code == 200, response.text
    return response.json()


def records(srv, layer: str, since: int = 0, **claims) -> dict:
    response = srv.http.get(srv.layer_url(srv.doc, layer) + "/records", params={"since": since},
                            headers=srv.auth(srv.doc, layer, **claims))
    assert response.status_code == 200, response.text
    return response.json()


def grouped(op: str, record_id: str, content: dict | None = None, base: int | None = None,
            group: object = None) -> dict:
    entry = change(op, record_id, content, base)
    entry["group"] = group
    return entry


# -- the claim -------------------------------------------------------------------------------

@pytest.mark.parametrize("entry", ["annotations:view", "widgets:view:all", "annotations:fill:all",
                                   "form-fields:reply:all", "comments:read:all",
                                   "annotations:view:group=", "annotations:view:owner=x",
                                   "annotations:view:everyone", ""])
def test_a_malformed_entry_is_refused_naming_it(entry):
    with pytest.raises(ClaimError) as raised:
        parse_claim(["annotations:view:all", entry])
    assert repr(entry) in str(raised.value)


def test_the_claim_parses_scopes_and_star():
    perms = parse_claim(["comments:*:self", "annotations:view:group=public",
                         "form-fields:fill:createdBy=lead"])
    assert allows(perms, "u", "reply", "pspdfkit/comment", "u", None)
    assert not allows(perms, "u", "reply", "pspdfkit/comment", "v", None)
    assert allows(perms, "u", "view", "pspdfkit/ink", "v", "public")
    assert not allows(perms, "u", "edit", "pspdfkit/ink", "v", "public")
    assert not allows(perms, "u", "fill", "pspdfkit/form-field-value", "lead", None)  # no view
    assert parse_claim(None) is None and allows(None, None, "delete", None, None, None)
    assert [content_type_of(t) for t in ("pspdfkit/comment", "pspdfkit/widget",
                                         "pspdfkit/form-field/text", "pspdfkit/form-field-value",
                                         "pspdfkit/comment-marker", "pspdfkit/bookmark",
                                         "xfdf/square", "acme/thing", None)] == \
        ["comments", "form-fields", "form-fields", "form-fields", "annotations", "annotations",
         "annotations", "annotations", "annotations"]


def test_a_malformed_claim_is_403_with_the_entry_on_every_route(srv):
    headers = srv.auth(srv.doc, "", collaboration_permissions=["annotations:view:all",
                                                                "annotations:peek:all"])
    for method, path in (("GET", "/records"), ("POST", "/sync"), ("GET", "/changes")):
        response = srv.http.request(method, srv.layer_url(srv.doc, "~") + path, headers=headers,
                                    json={"changes": []} if method == "POST" else None)
        assert response.status_code == 403, response.text
        assert "'annotations:peek:all'" in response.json()["error"]["message"]
    bad_type = srv.auth(srv.doc, "", collaboration_permissions="annotations:view:all")
    assert srv.http.get(srv.layer_url(srv.doc) + "/records", headers=bad_type).status_code == 403
    bad_group = srv.auth(srv.doc, "", default_group=7)
    assert srv.http.get(srv.layer_url(srv.doc) + "/records", headers=bad_group).status_code == 403


# -- ownership ----------------------------------------------------------------------------------

def test_ownership_is_stamped_and_sent_and_creator_name_forced(srv):
    layer = "own-" + uuid.uuid4().hex[:8]
    sync(srv, layer, [change("create", "a", note("a")), grouped("create", "b", note("b"), group="g9")],
         user_id="alice", default_group="team", creator_name="Alice A.")
    sync(srv, layer, [change("update", "a", note("a2"), base=1)], user_id="bob")
    got = {r["id"]: r for r in records(srv, layer)["records"]}
    assert {k: got["a"][k] for k in ("createdBy", "updatedBy", "group")} == \
        {"createdBy": "alice", "updatedBy": "bob", "group": "team"}
    assert got["b"]["group"] == "g9" and got["b"]["content"]["creatorName"] == "Alice A."
    assert "creatorName" not in got["a"]["content"]  # bob's update replaced it; bob has no name
    deleted = sync(srv, layer, [change("delete", "b", base=2)], since=3, user_id="carol")
    assert deleted["accepted"][0]["revision"] == 4


OWNERSHIP = ("createdBy", "updatedBy", "group")


def test_ownership_is_sent_without_a_claim_on_every_read_path(srv):
    """Without a ``collaboration_permissions`` claim (full access) every live record the
    server hands out still carries ``createdBy``, ``updatedBy`` and ``group``: snapshot,
    delta pages, a sync answer's changes and the long-poll; a record imported from the PDF,
    which no user created, has them as null (docs/protocol.md "Record shape")."""
    doc = srv.new_document()  # its default layer holds the PDF's annotations
    url = srv.layer_url(doc)
    plain = srv.auth(doc, "", user_id="alice")
    imported = srv.http.get(url + "/records", params={"since": 0}, headers=plain).json()
    start = imported["revision"]
    assert imported["records"] and all(r["createdBy"] is None and r["updatedBy"] is None and
                                       r["group"] is None for r in imported["records"])
    body = {"epoch": None, "since": start, "changes": [
        change("create", "own-a", note("a")), grouped("create", "own-b", note("b"), group="g1")]}
    answer = srv.http.post(url + "/sync", json=body, headers=srv.auth(doc, "", user_id="alice")).json()
    assert [a["id"] for a in answer["accepted"]] == ["own-a", "own-b"]
    bob = srv.auth(doc, "", user_id="bob")
    srv.http.post(url + "/sync", json={"epoch": None, "since": start + 2, "changes": [
        change("update", "own-a", note("a2"), base=start + 1)]}, headers=bob).raise_for_status()
    expected = {"own-a": ("alice", "bob", None), "own-b": ("alice", "alice", "g1")}

    def ownership(records):
        for record in records:
            assert all(key in record for key in OWNERSHIP), record  # present, even when null
        return {r["id"]: tuple(r[k] for k in OWNERSHIP) for r in records if r["id"] in expected}

    # the snapshot, and the delta in pages of one record
    snapshot = srv.http.get(url + "/records", params={"since": 0}, headers=plain).json()
    assert ownership(snapshot["records"]) == expected
    paged, since = [], start
    while True:
        page = srv.http.get(url + "/records", params={"since": since, "limit": 1}, headers=plain).json()
        paged += page["records"]
        since = page["next_since"]
        if not page["has_more"]:
            break
    assert len(paged) == 2 and ownership(paged) == expected
    # a sync answer's changes (a pull) and the long-poll
    pulled = srv.http.post(url + "/sync", json={"epoch": None, "since": start, "changes": []},
                           headers=plain).json()
    assert ownership(pulled["changes"]) == expected
    polled = srv.http.get(url + "/changes", params={"since": start, "wait": 0}, headers=plain).json()
    assert ownership(polled["records"]) == expected


# -- the matrix ---------------------------------------------------------------------------------

SCOPES = {"all": lambda by, group: True, "self": lambda by, group: by == "alice",
          "group=g1": lambda by, group: group == "g1", "createdBy=bob": lambda by, group: by == "bob"}
KINDS = {"annotations": note, "comments": lambda: comment("root-a"), "form-fields": widget}
OWNERS = (("alice", "g1"), ("bob", "g2"))


def _seed(srv, layer: str) -> dict:
    """Per owner: an annotation, a comment, a widget, a form field value (and the roots).
    Returns id -> (kind, createdBy, group, revision)."""
    made = {}
    for user, group in OWNERS:
        entries = [("ann-" + user, "annotations", note(user)),
                   ("com-" + user, "comments", comment("ann-" + user)),
                   ("wid-" + user, "form-fields", widget("f-" + user)),
                   ("val-" + user, "form-fields", value("f-" + user))]
        answer = sync(srv, layer, [grouped("create", i, c, group=group) for i, _, c in entries],
                      user_id=user)
        for (record_id, kind, _), accepted in zip(entries, answer["accepted"]):
            made[record_id] = (kind, user, group, accepted["revision"])
    return made


def _content(record_id: str) -> dict:
    kind, user = record_id.split("-", 1)
    return {"ann": lambda: note("edited"), "com": lambda: comment("ann-" + user, "edited"),
            "wid": lambda: {**widget("f-" + user), "bbox": [1, 1, 9, 9]},
            "val": lambda: value("f-" + user, "edited")}[kind]()


@pytest.mark.parametrize("scope", sorted(SCOPES))
@pytest.mark.parametrize("content_type,action", [
    (kind, action) for kind in sorted(KINDS) for action in ("view", "edit", "delete", "set-group")]
    + [("comments", "reply"), ("form-fields", "fill")])
def test_permission_matrix(srv, content_type, action, scope):
    layer = f"m-{content_type}-{action}-{scope}-{uuid.uuid4().hex[:6]}"
    made = _seed(srv, layer)
    claim = [f"{content_type}:{action}:{scope}"]
    if action != "view":
        claim.append(f"{content_type}:view:all")
    if action == "reply":  # a reply also needs to see the thread's root (an annotation)
        claim.append("annotations:view:all")
    me = {"user_id": "alice", "collaboration_permissions": claim, "permissions": ["read-document",
                                                                                   "write"]}
    covers = SCOPES[scope]

    def expected(record_id: str, act: str) -> bool:
        kind, by, group, _ = made[record_id]
        if kind != content_type:
            return False
        if act == "fill" and not record_id.startswith("val-"):
            return False
        if act == "edit" and record_id.startswith("val-"):
            return False  # a value changes by fill
        return covers(by, group)

    if action == "view":
        seen = {r["id"] for r in records(srv, layer, **me)["records"]}
        assert seen == {i for i in made if expected(i, "view")}
        delta = {r["id"]: r for r in records(srv, layer, since=1, **me)["records"]}
        for record_id in made:  # a delta: what is not visible is a bare tombstone
            if not expected(record_id, "view") and record_id in delta:
                assert delta[record_id] == {"id": record_id, "revision": made[record_id][3],
                                            "deleted": True, "content": None}
        return
    if action == "reply":
        targets = ["ann-alice", "ann-bob"]
        changes = [change("create", "new-" + t, comment(t)) for t in targets]
        answer = sync(srv, layer, changes, since=10 ** 6, **me)
        ok = {a["id"] for a in answer["accepted"]}
        for t in targets:
            kind, by, group, _ = made[t]
            assert ("new-" + t in ok) == covers(by, group), (t, answer)
        return
    targets = sorted(made)
    changes, new_group = [], {}
    current = {r["id"]: r for r in records(srv, layer)["records"]}
    for record_id in targets:
        base = made[record_id][3]
        if action == "delete":
            changes.append(change("delete", record_id, base=base))
        elif action == "set-group":
            new_group[record_id] = "g2" if made[record_id][2] == "g1" else "g1"
            changes.append(grouped("update", record_id, current[record_id]["content"], base=base,
                                   group=new_group[record_id]))
        else:
            changes.append(change("update", record_id, _content(record_id), base=base))
    answer = sync(srv, layer, changes, since=10 ** 6, **me)
    assert {a["id"] for a in answer["accepted"]} | {r["id"] for r in answer["rejected"]} == set(targets)
    # a record the token may not view answers as an unknown id (no existence oracle)
    assert all(r["reason"] == ("forbidden" if made[r["id"]][0] == content_type else "not_found")
               for r in answer["rejected"]), answer["rejected"]
    accepted = {a["id"] for a in answer["accepted"]}
    for record_id in targets:
        kind, by, group, _ = made[record_id]
        want = expected(record_id, action)
        if action == "set-group":  # Instant's set-group scope covers both ends of the move
            want = want and covers(by, new_group[record_id])
        if action == "delete" and record_id.startswith("ann-"):
            want = False  # the root takes its thread: a delete on its replies (comments) too
        assert (record_id in accepted) == want, (record_id, claim, answer)
    for rejected in answer["rejected"]:
        if made[rejected["id"]][0] == content_type:  # viewable: the server's version, to revert
            assert rejected["server_record"]["id"] == rejected["id"]
        else:  # not viewable: nothing of it is sent, not even that it exists
            assert rejected["server_record"] is None
            assert rejected["message"] == f"record {rejected['id']} does not exist"


def test_fill_is_the_action_of_a_value_and_edit_of_a_field(srv):
    layer = "fill-" + uuid.uuid4().hex[:8]
    made = _seed(srv, layer)
    filler = {"user_id": "alice", "collaboration_permissions": ["form-fields:view:all",
                                                                "form-fields:fill:all"]}
    answer = sync(srv, layer, [change("update", "val-bob", value("f-bob", "v2"), base=made["val-bob"][3]),
                               change("update", "wid-bob", _content("wid-bob"), base=made["wid-bob"][3])],
                  since=10 ** 6, **filler)
    assert [a["id"] for a in answer["accepted"]] == ["val-bob"]
    assert [(r["id"], r["reason"]) for r in answer["rejected"]] == [("wid-bob", "forbidden")]


def text_field(name: str, widget_id: str) -> dict:
    return {"v": 1, "type": "pspdfkit/form-field/text", "name": name, "label": name,
            "annotationIds": [widget_id], "doNotSpellCheck": False, "doNotScroll": False,
            "multiLine": False, "comb": False, "defaultValue": "", "password": False,
            "richText": False}


AGENT = {"user_id": "id-1", "default_group": "estateAgent", "collaboration_permissions": [
    "annotations:view:all", "form-fields:view:all", "form-fields:edit:all", "form-fields:delete:all",
    "form-fields:set-group:group=estateAgent", "form-fields:set-group:group=assignedToTenant"]}
TENANT = {"user_id": "id-3", "collaboration_permissions": [
    "annotations:view:all", "form-fields:view:all", "form-fields:fill:group=assignedToTenant"]}


def test_fill_is_scoped_by_the_form_fields_group_landlord_and_tenant(srv):
    """Instant's landlord/tenant example: the agent puts a field in group assignedToTenant;
    the tenant, whose own default group is none, may fill it (the value gets the field's
    group) and nothing else."""
    layer = "tenant-" + uuid.uuid4().hex[:8]
    agent = sync(srv, layer, [grouped("create", "w-tenant", widget("tenant_name"), group="assignedToTenant"),
                              grouped("create", "f-tenant", text_field("tenant_name", "w-tenant"),
                                      group="assignedToTenant"),
                              change("create", "w-sig", widget("landlord_sig")),
                              change("create", "f-sig", text_field("landlord_sig", "w-sig"))], **AGENT)
    assert len(agent["accepted"]) == 4, agent["rejected"]
    filled = sync(srv, layer, [change("create", "v-tenant", value("tenant_name", "Jane")),
                               change("create", "v-sig", value("landlord_sig", "Jane"))], **TENANT)
    assert [a["id"] for a in filled["accepted"]] == ["v-tenant"]
    assert [(r["id"], r["reason"], r["message"]) for r in filled["rejected"]] == [
        ("v-sig", "forbidden", "may not fill this form field")]
    stored = {r["id"]: r for r in records(srv, layer)["records"]}
    assert (stored["v-tenant"]["group"], stored["v-tenant"]["createdBy"]) == ("assignedToTenant", "id-3")
    base = stored["v-tenant"]["revision"]
    # updating the value is filling the field again; renaming it onto another field needs fill there
    moved = sync(srv, layer, [change("update", "v-tenant", value("landlord_sig", "Jane"), base=base)],
                 since=10 ** 6, **TENANT)
    assert [(r["id"], r["reason"]) for r in moved["rejected"]] == [("v-tenant", "forbidden")]
    again = sync(srv, layer, [change("update", "v-tenant", value("tenant_name", "Jane Doe"), base=base)],
                 since=10 ** 6, **TENANT)
    assert [a["id"] for a in again["accepted"]] == ["v-tenant"], again["rejected"]
    # the field's group named explicitly is no group change
    named = sync(srv, layer, [grouped("create", "v-named", value("tenant_name", "x"), group="assignedToTenant")],
                 since=10 ** 6, **TENANT)
    assert [a["id"] for a in named["accepted"]] == ["v-named"], named["rejected"]
    # the agent's value of the landlord's field: the tenant may not change it
    sync(srv, layer, [change("create", "v-agent", value("landlord_sig", "Agent"))],
         **{**AGENT, "collaboration_permissions": AGENT["collaboration_permissions"] + ["form-fields:fill:all"]})
    agent_value = {r["id"]: r for r in records(srv, layer)["records"]}["v-agent"]
    assert agent_value["group"] == "estateAgent"  # inherited from f-sig (the agent's default group)
    taken = sync(srv, layer, [change("update", "v-agent", value("landlord_sig", "Jane"),
                                     base=agent_value["revision"])], since=10 ** 6, **TENANT)
    assert [(r["id"], r["reason"]) for r in taken["rejected"]] == [("v-agent", "forbidden")]
    assert taken["rejected"][0]["server_record"]["content"]["value"] == "Agent"


def test_fill_scoped_by_the_form_fields_creator_and_a_value_without_a_field(srv):
    layer = "fillby-" + uuid.uuid4().hex[:8]
    sync(srv, layer, [change("create", "w1", widget("a")), change("create", "fa", text_field("a", "w1"))],
         user_id="lead", default_group="forms")
    filler = {"user_id": "carol", "default_group": "review", "collaboration_permissions": [
        "form-fields:view:all", "form-fields:fill:createdBy=lead"]}
    answer = sync(srv, layer, [change("create", "va", value("a", "carol")),
                               change("create", "vnone", value("no-such-field", "carol"))], **filler)
    # a's value: the field was created by lead; a value whose field the layer does not have is
    # judged by itself (created by carol, in her default group): createdBy=lead does not cover it
    assert [a["id"] for a in answer["accepted"]] == ["va"]
    assert [(r["id"], r["reason"]) for r in answer["rejected"]] == [("vnone", "forbidden")]
    own = {**filler, "collaboration_permissions": ["form-fields:view:all", "form-fields:fill:self"]}
    assert [a["id"] for a in sync(srv, layer, [change("create", "vnone2", value("none", "c"))],
                                  since=10 ** 6, **own)["accepted"]] == ["vnone2"]
    stored = {r["id"]: r for r in records(srv, layer)["records"]}
    assert stored["va"]["group"] == "forms" and stored["vnone2"]["group"] == "review"
    # without a claim the value inherits its field's group too
    sync(srv, layer, [change("create", "vfree", value("a", "free"))], user_id="free", default_group="x")
    assert {r["id"]: r for r in records(srv, layer)["records"]}["vfree"]["group"] == "forms"


def test_fill_needs_view_of_the_form_field(srv):
    """``fill:all`` without ``view`` of a field's group fills no value of that field: a create
    and an update are refused as any fill is (the value would otherwise take the hidden
    field's group and fill it in the PDF export), and so is renaming a value onto it; with
    ``view`` of the group the same changes are accepted. A name no field has is judged by the
    value itself (accepted here): what a token that may create values can tell apart
    (docs/protocol.md, "Filling a form field")."""
    layer = "fillview-" + uuid.uuid4().hex[:8]
    made = sync(srv, layer, [grouped("create", "w-hid", widget("hidden"), group="X"),
                             grouped("create", "f-hid", text_field("hidden", "w-hid"), group="X"),
                             grouped("create", "w-shown", widget("shown"), group="Y"),
                             grouped("create", "f-shown", text_field("shown", "w-shown"), group="Y"),
                             grouped("create", "v-lead", value("hidden", "lead's"), group="Y")], user_id="lead")
    assert len(made["accepted"]) == 5, made["rejected"]
    lead_rev = made["accepted"][-1]["revision"]
    blind = {"user_id": "u", "default_group": "Y",
             "collaboration_permissions": ["form-fields:view:group=Y", "form-fields:fill:all",
                                           "form-fields:set-group:group=Y"]}
    created = sync(srv, layer, [change("create", "v-hid", value("hidden", "u")),
                                grouped("create", "v-hid-x", value("hidden", "u"), group="X"),
                                grouped("create", "v-hid-y", value("hidden", "u"), group="Y"),
                                change("create", "v-shown", value("shown", "u")),
                                change("create", "v-none", value("no-such-field", "u"))], **blind)
    assert [a["id"] for a in created["accepted"]] == ["v-shown", "v-none"]
    assert [(r["id"], r["reason"], r["message"], r["server_record"]) for r in created["rejected"]] == [
        ("v-hid", "forbidden", "may not fill this form field", None),
        ("v-hid-x", "forbidden", "may not fill this form field", None),
        ("v-hid-y", "forbidden", "may not fill this form field", None)]
    shown_rev = created["accepted"][0]["revision"]
    # an update of a value the token may view, whose field it may not: refused, nothing stored
    updated = sync(srv, layer, [change("update", "v-lead", value("hidden", "u's"), base=lead_rev),
                                change("update", "v-shown", value("hidden", "u"), base=shown_rev)],
                   since=10 ** 6, **blind)
    assert updated["accepted"] == []
    assert [(r["id"], r["reason"], r["message"]) for r in updated["rejected"]] == [
        ("v-lead", "forbidden", "may not fill this record"), ("v-shown", "forbidden", "may not fill this record")]
    assert updated["rejected"][0]["server_record"]["content"]["value"] == "lead's"
    stored = {r["id"]: r for r in records(srv, layer)["records"]}
    assert not {"v-hid", "v-hid-x", "v-hid-y"} & set(stored)
    assert (stored["v-lead"]["content"]["value"], stored["v-shown"]["content"]["name"]) == ("lead's", "shown")
    assert (stored["v-shown"]["group"], stored["v-none"]["group"]) == ("Y", "Y")
    # with view of the field's group, the same changes are fills of a field the token sees
    seeing = {**blind, "collaboration_permissions": blind["collaboration_permissions"] + ["form-fields:view:group=X"]}
    again = sync(srv, layer, [change("create", "v-hid", value("hidden", "u")),
                              grouped("create", "v-hid-y", value("hidden", "u"), group="Y"),
                              change("update", "v-lead", value("hidden", "u's"), base=lead_rev),
                              change("update", "v-shown", value("hidden", "u"), base=shown_rev)],
                 since=10 ** 6, **seeing)
    assert [a["id"] for a in again["accepted"]] == ["v-hid", "v-hid-y", "v-lead", "v-shown"], again["rejected"]
    assert {r["id"]: r for r in records(srv, layer)["records"]}["v-hid"]["group"] == "X"  # the field's


# -- batches and groups -------------------------------------------------------------------------

def test_a_forbidden_change_in_a_batch_of_1000_is_rejected_alone(srv):
    layer = "batch-" + uuid.uuid4().hex[:8]
    sync(srv, layer, [change("create", "bobs", note("bob's"))], user_id="bob")
    me = {"user_id": "alice", "collaboration_permissions": ["annotations:view:all",
                                                            "annotations:edit:self"]}
    changes = [change("create", f"n{i:04}", note(str(i))) for i in range(999)]
    changes.insert(500, change("update", "bobs", note("mine now"), base=1))
    answer = sync(srv, layer, changes, **me)
    assert len(answer["accepted"]) == 999
    assert [(r["id"], r["reason"]) for r in answer["rejected"]] == [("bobs", "forbidden")]
    assert answer["rejected"][0]["server_record"]["content"]["text"]["value"] == "bob's"
    assert len(records(srv, layer)["records"]) == 1000


def test_group_changes_need_set_group_at_both_ends(srv):
    layer = "grp-" + uuid.uuid4().hex[:8]
    sync(srv, layer, [grouped("create", "r", note("r"), group="draft")], user_id="alice")
    base = ["annotations:view:all", "annotations:edit:all"]
    plain = {"user_id": "alice", "collaboration_permissions": base}
    mover = {"user_id": "alice", "collaboration_permissions": base + [
        "annotations:set-group:group=draft", "annotations:set-group:group=public"]}
    content = records(srv, layer)["records"][0]["content"]
    refused = sync(srv, layer, [grouped("update", "r", content, base=1, group="public")], **plain)
    assert refused["rejected"][0]["reason"] == "forbidden"
    assert refused["rejected"][0]["message"] == "may not move this record to group 'public'"
    assert refused["rejected"][0]["server_record"]["group"] == "draft"
    # out of every group: the words say "no group" (not Python's None); the client's mirror alike
    ungrouped = sync(srv, layer, [grouped("update", "r", content, base=1, group=None)], **mover)
    assert ungrouped["rejected"][0]["message"] == "may not move this record to no group", ungrouped
    nowhere = sync(srv, layer, [grouped("update", "r", content, base=1, group="secret")], **mover)
    assert nowhere["rejected"][0]["reason"] == "forbidden"
    moved = sync(srv, layer, [grouped("update", "r", content, base=1, group="public")], **mover)
    assert moved["accepted"][0]["revision"] == 2
    assert records(srv, layer)["records"][0]["group"] == "public"
    edited = sync(srv, layer, [change("update", "r", note("edit keeps the group"), base=2)], **plain)
    assert edited["accepted"] and records(srv, layer)["records"][0]["group"] == "public"
    # creating into a group other than the default needs set-group for it
    denied = sync(srv, layer, [grouped("create", "x", note(), group="secret")], default_group="mine",
                  **plain)
    assert denied["rejected"][0]["reason"] == "forbidden" and denied["rejected"][0]["server_record"] is None
    # and creating needs the plain write permission
    reader = {**plain, "permissions": ["read-document"]}
    assert sync(srv, layer, [change("create", "y", note())], **reader)["rejected"][0]["reason"] == "forbidden"
    # the guest's view: a group change out of its view reaches it as a bare tombstone
    guest = {"user_id": "guest", "collaboration_permissions": ["annotations:view:group=public"]}
    assert [r["id"] for r in records(srv, layer, **guest)["records"]] == ["r"]
    sync(srv, layer, [grouped("update", "r", records(srv, layer)["records"][0]["content"],
                              base=3, group="draft")], **mover)
    delta = records(srv, layer, since=3, **guest)["records"]
    assert delta == [{"id": "r", "revision": 4, "deleted": True, "content": None}]


def test_a_pure_group_change_is_judged_by_json_not_python_equality(srv):
    """set-group without edit moves a record only when its content is the same JSON: false
    over 0, true over 1, 1.0 over 1 are content changes (Python's == says equal), refused."""
    layer = "grpjson-" + uuid.uuid4().hex[:8]
    stored = note("x", customData={"approved": 0, "locked": 1, "score": 2})
    sync(srv, layer, [grouped("create", "r", stored, group="a")], user_id="lead")
    mover = {"user_id": "mover", "collaboration_permissions": ["annotations:view:all",
                                                               "annotations:set-group:all"]}
    for sneaked in ({"approved": False, "locked": 1, "score": 2}, {"approved": 0, "locked": True, "score": 2},
                    {"approved": 0, "locked": 1, "score": 2.0}):
        refused = sync(srv, layer, [grouped("update", "r", dict(stored, customData=sneaked), base=1,
                                            group="b")], **mover)
        assert refused["rejected"] and refused["rejected"][0]["reason"] == "forbidden", (sneaked, refused)
        assert refused["rejected"][0]["message"] == "may not edit this record"
    kept = records(srv, layer)["records"][0]
    assert json.dumps(kept["content"]["customData"]) == json.dumps(stored["customData"])
    assert kept["group"] == "a" and kept["revision"] == 1
    # the same JSON (keys in another order) is a pure group change
    moved = sync(srv, layer, [grouped("update", "r", dict(reversed(list(kept["content"].items()))),
                                      base=1, group="b")], **mover)
    assert moved["accepted"] and records(srv, layer)["records"][0]["group"] == "b"


def test_deleting_a_root_needs_delete_on_every_reply(srv):
    layer = "root-" + uuid.uuid4().hex[:8]
    sync(srv, layer, [change("create", "root", note("root")), change("create", "mine", comment("root"))],
         user_id="alice")
    sync(srv, layer, [change("create", "theirs", comment("root"))], user_id="bob")
    own = {"user_id": "alice", "collaboration_permissions": [
        "annotations:view:all", "annotations:delete:self", "comments:view:all", "comments:delete:self"]}
    refused = sync(srv, layer, [change("delete", "root", base=1)], **own)
    assert refused["rejected"][0]["reason"] == "forbidden"
    assert "theirs" in refused["rejected"][0]["message"]
    lead = {"user_id": "alice", "collaboration_permissions": ["annotations:*:all", "comments:*:all"]}
    assert sync(srv, layer, [change("delete", "root", base=1)], **lead)["accepted"]
    assert records(srv, layer)["records"] == []


PUBLIC_REPLIER = ["annotations:view:all", "comments:view:all", "comments:reply:group=public",
                  "comments:edit:self", "annotations:edit:self"]


def test_moving_a_reply_into_another_thread_needs_reply_there(srv):
    """An update that sets or changes rootId needs what creating a reply in that thread needs."""
    layer = "move-" + uuid.uuid4().hex[:8]
    sync(srv, layer, [grouped("create", "pub", note("p"), group="public"),
                      grouped("create", "priv", note("q"), group="private")], user_id="lead")
    pat = {"user_id": "pat", "collaboration_permissions": PUBLIC_REPLIER}
    created = sync(srv, layer, [change("create", "cm", comment("pub"))], **pat)
    rev = created["accepted"][0]["revision"]
    moved = sync(srv, layer, [change("update", "cm", comment("priv"), base=rev)], **pat)
    assert moved["rejected"][0]["reason"] == "forbidden", moved
    assert moved["rejected"][0]["message"] == "may not reply to this thread"
    # a note of pat's own may not be hung under the private root either, nor under a public one
    # without reply on it (notes in public threads: reply matched against the root, as comments)
    sync(srv, layer, [change("create", "pn", note("mine"))], **pat)
    into = sync(srv, layer, [change("update", "pn", note("mine", rootId="priv"), base=rev + 1)], **pat)
    assert into["rejected"][0]["reason"] == "forbidden", into
    ok = sync(srv, layer, [change("update", "cm", comment("pub", "edited"), base=rev)], **pat)
    assert ok["accepted"], ok  # same thread: edit is enough


def test_a_rollback_into_another_thread_needs_reply_there(srv):
    layer = "rbmove-" + uuid.uuid4().hex[:8]
    sync(srv, layer, [grouped("create", "pub", note("p"), group="public"),
                      grouped("create", "priv", note("q"), group="private")], user_id="lead")
    pat = {"user_id": "pat", "collaboration_permissions": PUBLIC_REPLIER}
    rev = sync(srv, layer, [change("create", "cm", comment("pub"))], **pat)["accepted"][0]["revision"]
    lead = {"user_id": "lead", "collaboration_permissions": ["annotations:*:all", "comments:*:all"]}
    into = sync(srv, layer, [change("update", "cm", comment("priv"), base=rev)], **lead)["accepted"][0]["revision"]
    back = sync(srv, layer, [change("update", "cm", comment("pub"), base=into)], **lead)["accepted"][0]["revision"]
    response = srv.http.post(srv.layer_url(srv.doc, layer) + "/records/cm/rollback",
                             json={"revision": into, "base_revision": back},
                             headers=srv.auth(srv.doc, layer, **pat))
    assert response.status_code == 403, response.text
    assert response.json()["error"]["message"] == "may not reply to this thread"
    # with reply on the thread the rollback goes through (the rule is given the new root)
    response = srv.http.post(srv.layer_url(srv.doc, layer) + "/records/cm/rollback",
                             json={"revision": into, "base_revision": back},
                             headers=srv.auth(srv.doc, layer, **lead))
    assert response.status_code == 200, response.text


def test_a_record_of_any_type_with_rootid_is_a_reply(srv):
    """A note with rootId needs reply on the thread (and view of its root), as a comment does."""
    layer = "squat-" + uuid.uuid4().hex[:8]
    bob = {"user_id": "bob", "collaboration_permissions": [
        "annotations:view:all", "annotations:edit:self", "annotations:delete:self",
        "comments:view:all", "comments:reply:all", "comments:delete:self"]}
    rev = sync(srv, layer, [change("create", "bobroot", note("bob's"))], **bob)["accepted"][0]["revision"]
    guest = {"user_id": "gus", "collaboration_permissions": ["annotations:view:group=public",
                                                             "comments:view:group=public"]}
    squat = sync(srv, layer, [change("create", "squat", note("x", rootId="bobroot"))], **guest)
    assert squat["rejected"][0]["reason"] == "forbidden", squat
    assert squat["rejected"][0]["message"] == "may not reply to this thread"
    replier = sync(srv, layer, [change("create", "hung", note("y", rootId="bobroot"))], **bob)
    assert replier["accepted"], replier  # with reply on the thread it is a reply: allowed
    assert sync(srv, layer, [change("delete", "bobroot", base=rev)], **bob)["accepted"]
    assert records(srv, layer)["records"] == []  # the cascade takes it along, as before


def test_every_update_needs_edit_even_one_that_changes_nothing(srv):
    layer = "noop-" + uuid.uuid4().hex[:8]
    sync(srv, layer, [change("create", "r", note("lead's"))], user_id="lead")
    content = records(srv, layer)["records"][0]["content"]
    bob = {"user_id": "bob", "collaboration_permissions": ["annotations:view:all", "annotations:edit:self"]}
    same = sync(srv, layer, [change("update", "r", content, base=1)], **bob)
    assert same["rejected"][0]["reason"] == "forbidden" and same["rejected"][0]["message"] == \
        "may not edit this record"
    assert records(srv, layer)["records"][0]["updatedBy"] == "lead"


def test_creator_name_is_kept_on_updates(srv):
    layer = "name-" + uuid.uuid4().hex[:8]
    bob = {"user_id": "bob", "creator_name": "Bob B", "collaboration_permissions": [
        "annotations:view:all", "annotations:edit:all"]}
    sync(srv, layer, [change("create", "r", note("mine", creatorName="Someone Else"))], **bob)
    assert records(srv, layer)["records"][0]["content"]["creatorName"] == "Bob B"
    sync(srv, layer, [change("update", "r", note("mine2", creatorName="The Lead"), base=1)], **bob)
    assert records(srv, layer)["records"][0]["content"]["creatorName"] == "Bob B"
    # a lead editing bob's note keeps bob's name, not the lead's
    lead = {**bob, "user_id": "lead", "creator_name": "Lead L"}
    sync(srv, layer, [change("update", "r", note("edited by lead"), base=2)], **lead)
    got = records(srv, layer)["records"][0]
    assert got["content"]["creatorName"] == "Bob B" and got["content"]["text"]["value"] == "edited by lead"


def test_a_refused_root_delete_does_not_name_an_invisible_reply(srv):
    layer = "leak-" + uuid.uuid4().hex[:8]
    bob = {"user_id": "bob", "collaboration_permissions": [
        "annotations:view:all", "annotations:delete:self", "comments:view:group=public",
        "comments:delete:self"]}
    rev = sync(srv, layer, [change("create", "bobroot", note("bob's"))], **bob)["accepted"][0]["revision"]
    sync(srv, layer, [grouped("create", "secret-reply-id", comment("bobroot"), group="private")],
         user_id="lead")
    refused = sync(srv, layer, [change("delete", "bobroot", base=rev)], **bob)
    assert refused["rejected"][0]["reason"] == "forbidden"
    assert "secret-reply-id" not in json.dumps(refused["rejected"])
    assert refused["rejected"][0]["message"] == "may not delete a reply of this thread that you may not view"


# -- reauthentication ---------------------------------------------------------------------------

def test_wider_and_narrower_grants_make_records_appear_and_disappear(srv):
    layer = "reauth-" + uuid.uuid4().hex[:8]
    sync(srv, layer, [grouped("create", "pub", note("p"), group="public"),
                      grouped("create", "priv", note("q"), group="private")], user_id="lead")
    narrow = ["annotations:view:group=public"]
    wide = ["annotations:view:all"]

    def regrant(now: list | None, before: list | None) -> list:
        claims = {} if now is None else {"collaboration_permissions": now}
        response = srv.http.get(srv.layer_url(srv.doc, layer) + "/records",
                                params={"since": 2, "previous_permissions": json.dumps(before)},
                                headers=srv.auth(srv.doc, layer, user_id="guest", **claims))
        assert response.status_code == 200, response.text
        assert response.json()["records"] == []
        return response.json()["regranted"]

    widened = regrant(wide, narrow)
    assert [(r["id"], r["deleted"], r["group"]) for r in widened] == [("priv", False, "private")]
    narrowed = regrant(narrow, wide)
    assert narrowed == [{"id": "priv", "revision": 2, "deleted": True, "content": None}]
    assert regrant(narrow, None) == narrowed  # the previous token had no claim: it saw all
    assert regrant(narrow, narrow) == []
    assert [r["id"] for r in regrant(None, narrow)] == ["priv"]
    bad = srv.http.get(srv.layer_url(srv.doc, layer) + "/records",
                       params={"since": 2, "previous_permissions": '["annotations:see:all"]'},
                       headers=srv.auth(srv.doc, layer, collaboration_permissions=narrow))
    assert bad.status_code == 400 and "annotations:see:all" in bad.json()["error"]["message"]


# -- the property: nothing outside the view grant leaves the server -----------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

USERS = ("u1", "u2", "u3")
GROUPS = ("g1", "g2")
ENTRY = st.builds(lambda kind, action, scope: f"{kind}:{action}:{scope}",
                  st.sampled_from(("annotations", "comments", "form-fields")),
                  st.sampled_from(("view", "edit", "delete", "set-group", "*")),
                  st.sampled_from(("all", "self", "group=g1", "group=g2", "createdBy=u1",
                                   "createdBy=u2")))


def _oracle_view(claim: list, user: str, record_type, created_by, group) -> bool:
    """What the docs say a view grant covers, written apart from permissions.py."""
    kind = ("comments" if record_type == "pspdfkit/comment" else "form-fields"
            if str(record_type).startswith(("pspdfkit/form-field", "pspdfkit/widget"))
            else "annotations")
    for entry in claim:
        ct, action, scope = entry.split(":", 2)
        if ct == kind and action in ("view", "*") and (
                scope == "all" or (scope == "self" and created_by == user)
                or scope == f"group={group}" or scope == f"createdBy={created_by}"):
            return True
    return False


@pytest.fixture(scope="module")
def seeded(srv):
    """A layer of records of every kind, owner and group, some deleted, one image that
    uses an attachment: ``(layer, {id: (type, createdBy, group)}, attachment hash)``."""
    import hashlib
    layer = "prop-" + uuid.uuid4().hex[:8]
    data = b"\x89PNG fake image bytes"
    sha = hashlib.sha256(data).hexdigest()
    put = srv.http.put(f"/sync/v1/documents/{srv.doc}/attachments/{sha}", content=data,
                       headers=srv.auth(srv.doc, None))
    assert put.status_code in (200, 201), put.text
    owners, since = {}, 0
    owners_log.clear()
    for n, (user, group) in enumerate((u, g) for u in USERS for g in (*GROUPS, None)):
        image = {"v": 2, "type": "pspdfkit/image", "pageIndex": 0, "bbox": [0, 0, 10, 10],
                 "imageAttachmentId": sha, "contentType": "image/png",
                 "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z"}
        made = {f"a{n}": note(), f"c{n}": comment(f"a{n}"), f"w{n}": widget(f"f{n}"),
                f"v{n}": value(f"f{n}"), f"gone{n}": note("deleted")}
        if n in (1, 7):
            made[f"img{n}"] = image
        answer = sync(srv, layer, [grouped("create", i, c, group=group) for i, c in made.items()],
                      since=10 ** 6, user_id=user)
        for i, c in made.items():
            owners[i] = (c["type"], user, group)
            revision = next(a["revision"] for a in answer["accepted"] if a["id"] == i)
            owners_log[i] = {"content": c, "versions": [(revision, group, False)]}
        revision = next(a["revision"] for a in answer["accepted"] if a["id"] == f"gone{n}")
        gone = sync(srv, layer, [change("delete", f"gone{n}", base=revision)], since=10 ** 6,
                    user_id=user)["accepted"][0]["revision"]
        owners_log[f"gone{n}"]["versions"].append((gone, group, True))
    return layer, owners, sha


#: Per record of ``seeded``: its content and versions ``(revision, group, deleted)``, oldest
#: first, which the property test's random group moves extend.
owners_log: dict = {}


def _move(srv, layer, owners, record_id: str, group) -> None:
    """Move a live record of ``seeded`` to ``group`` (a token without a claim), so that its
    history holds versions of several groups."""
    log = owners_log[record_id]
    base = log["versions"][-1][0]
    answer = sync(srv, layer, [grouped("update", record_id, log["content"], base=base, group=group)],
                  since=10 ** 6)
    log["versions"].append((answer["accepted"][0]["revision"], group, False))
    record_type, by, _ = owners[record_id]
    owners[record_id] = (record_type, by, group)


MOVABLE = [f"{kind}{n}" for n in range(9) for kind in ("a", "c", "w", "v")] + ["img1", "img7"]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(claim=st.lists(ENTRY, max_size=4), user=st.sampled_from(USERS),
       moves=st.lists(st.tuples(st.sampled_from(MOVABLE), st.sampled_from((*GROUPS, None))),
                      max_size=3))
def test_no_endpoint_sends_a_record_outside_the_view_grant(srv, seeded, claim, user, moves):
    layer, owners, sha = seeded
    for record_id, group in moves:  # past versions in other groups than the record's now
        _move(srv, layer, owners, record_id, group)
    headers = srv.auth(srv.doc, layer, user_id=user, collaboration_permissions=claim)
    url = srv.layer_url(srv.doc, layer)

    def check(wire: dict, where: str):
        if wire.get("content") is None:
            assert set(wire) == {"id", "revision", "deleted", "content"}, (where, wire)
            return
        record_type, by, group = owners[wire["id"]]
        assert _oracle_view(claim, user, record_type, by, group), (where, wire, claim, user)

    seen = {}
    for since in (0, 1):
        for r in srv.http.get(url + "/records", params={"since": since}, headers=headers).json()["records"]:
            check(r, "records")
            seen[r["id"]] = r
    for r in srv.http.get(url + "/changes", params={"since": 0, "wait": 0.05},
                          headers=headers).json()["records"]:
        check(r, "changes")
    answer = srv.http.post(url + "/sync", headers=headers, json={"since": 0, "changes": [
        change("update", i, note(), base=0) for i in owners]}).json()
    for r in answer["changes"]:
        check(r, "sync changes")
    for r in answer["rejected"]:
        if r["server_record"] is not None:
            check(r["server_record"], "sync rejected")
    for record_id, (record_type, by, group) in owners.items():
        history = srv.http.get(f"{url}/records/{record_id}/history", headers=headers)
        assert history.status_code == (200 if _oracle_view(claim, user, record_type, by, group)
                                       else 404), (record_id, claim, user, history.text)
        if history.status_code != 200:
            continue
        kept = owners_log[record_id]["versions"][-20:]  # history_versions
        expected = [revision for revision, at, _ in reversed(kept)
                    if _oracle_view(claim, user, record_type, by, at)]  # each as it was
        versions = history.json()["versions"]
        assert [v["revision"] for v in versions] == expected, (record_id, claim, user, versions)
        groups = {revision: at for revision, at, _ in kept}
        for version in versions:
            if version["content"] is not None:
                assert (version["createdBy"], version["group"]) == (by, groups[version["revision"]])
    deleted = srv.http.get(url + "/deleted", headers=headers).json()["records"]
    for r in deleted:
        record_type, by, group = owners[r["id"]]
        assert _oracle_view(claim, user, record_type, by, group)
    assert len(deleted) == sum(_oracle_view(claim, user, *owners[i]) for i in owners
                               if i.startswith("gone"))
    attachment = srv.http.get(f"/sync/v1/documents/{srv.doc}/attachments/{sha}",
                              headers=srv.auth(srv.doc, layer, user_id=user,
                                               collaboration_permissions=claim))
    images = [i for i in owners if i.startswith("img") and _oracle_view(claim, user, *owners[i])]
    assert attachment.status_code == (200 if images else 404)
    assert {i for i, r in seen.items() if r["content"] is not None} == {
        i for i in owners if not i.startswith("gone") and _oracle_view(claim, user, *owners[i])}


# -- admin API and mint-token ------------------------------------------------------------------

def test_the_admin_annotation_routes_set_and_show_the_group(srv):
    layer = "admin-" + uuid.uuid4().hex[:8]
    base = f"/api/documents/{srv.doc}/layers/{layer}/annotations"
    srv.http.post(f"/api/documents/{srv.doc}/layers", json={"name": layer}, headers=srv.admin())
    created = srv.http.post(base, json={"id": "adm", "content": note("x"), "user_id": "lead",
                                        "group": "review"}, headers=srv.admin())
    assert created.status_code == 200, created.text
    assert created.json()["data"]["group"] == "review" and created.json()["data"]["createdBy"] == "lead"
    moved = srv.http.put(f"{base}/adm", json={"content": note("y"), "user_id": "ed", "group": "public"},
                         headers=srv.admin())
    assert moved.status_code == 200, moved.text
    assert {k: moved.json()["data"][k] for k in ("createdBy", "updatedBy", "group")} == \
        {"createdBy": "lead", "updatedBy": "ed", "group": "public"}
    kept = srv.http.put(f"{base}/adm", json={"content": note("z")}, headers=srv.admin())
    assert kept.json()["data"]["group"] == "public"
    guest = {"collaboration_permissions": ["annotations:view:group=public"]}
    assert [r["group"] for r in records(srv, layer, **guest)["records"]] == ["public"]


def test_mint_token_takes_the_collaboration_claims(keys, tmp_path):
    import subprocess
    import sys

    import jwt
    private = tmp_path / "private.pem"
    private.write_bytes(keys[0])
    command = [sys.executable, "-m", "layersync_server", "mint-token", "--private-key", str(private),
               "--document-id", "d", "--user-id", "u", "--default-group", "team",
               "--creator-name", "U. Ser", "--collaboration-permissions",
               "annotations:view:all,annotations:edit:self", "--collaboration-permissions",
               "comments:*:group=team"]
    minted = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
    claims = jwt.decode(minted, options={"verify_signature": False})
    assert claims["collaboration_permissions"] == ["annotations:view:all", "annotations:edit:self",
                                                   "comments:*:group=team"]
    assert claims["default_group"] == "team" and claims["creator_name"] == "U. Ser"
    bad = subprocess.run(command[:-1] + ["comments:peek:all"], capture_output=True, text=True)
    assert bad.returncode == 2 and "'comments:peek:all'" in bad.stderr


def test_mint_token_takes_an_entry_with_a_comma_as_it_is(srv, keys, tmp_path):
    """A group name (or user id) may hold a comma: --collaboration-permission takes one entry
    verbatim; it mixes with the comma-separated --collaboration-permissions, in order."""
    import subprocess
    import sys

    import jwt
    private = tmp_path / "private.pem"
    private.write_bytes(keys[0])
    layer = "comma-" + uuid.uuid4().hex[:8]
    command = [sys.executable, "-m", "layersync_server", "mint-token", "--private-key", str(private),
               "--document-id", srv.doc, "--layer", layer, "--user-id", "u",
               "--collaboration-permissions", "comments:view:all,comments:edit:self",
               "--collaboration-permission", "annotations:view:group=Smith, Jones",
               "--collaboration-permission", "annotations:edit:createdBy=a,b"]
    minted = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
    claims = jwt.decode(minted, options={"verify_signature": False})
    assert claims["collaboration_permissions"] == [
        "comments:view:all", "comments:edit:self", "annotations:view:group=Smith, Jones",
        "annotations:edit:createdBy=a,b"]
    sync(srv, layer, [grouped("create", "in", note("in"), group="Smith, Jones"),
                      grouped("create", "out", note("out"), group="Smith")])
    seen = srv.http.get(srv.layer_url(srv.doc, layer) + "/records",
                        headers={"Authorization": f"Bearer {minted}"})
    assert seen.status_code == 200, seen.text
    assert [r["id"] for r in seen.json()["records"]] == ["in"]
