"""Collaboration permissions on the client, against the real server (docs/protocol.md
"Collaboration permissions"): records handed out with ownership and flags, forbidden local
changes refused with nothing queued, the default group, reauthentication widening and
narrowing the view, and a change the server forbids in the middle of a big batch."""
from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request

import pytest

import layersync
from conftest import WAIT_S

LEAD = ["annotations:*:all", "comments:*:all", "form-fields:*:all"]
REVIEWER = ["annotations:view:all", "annotations:edit:self", "annotations:delete:self",
            "comments:view:all", "comments:reply:all", "comments:edit:self", "comments:delete:self"]
GUEST = ["annotations:view:group=public", "comments:view:group=public"]


def note(text: str, **extra):
    return {"type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 10, 24, 24], "icon": "comment",
            "color": "#ffd600", "text": {"format": "plain", "value": text}, **extra}


class Changes:
    """Collects did_receive_changes and did_reject_changes of one document."""

    def __init__(self, client: layersync.Client) -> None:
        self.received: list[tuple[list, list, list]] = []
        self.rejected: list[dict] = []
        self.auth_failures = 0
        self._cv = threading.Condition()
        client.on("did_receive_changes", self._receive)
        client.on("did_reject_changes", self._reject)
        client.on("did_fail_authentication", self._auth)

    def _receive(self, doc, changes) -> None:
        with self._cv:
            self.received.append((list(changes["created"]), list(changes["updated"]), list(changes["deleted"])))
            self._cv.notify_all()

    def _reject(self, doc, rejections) -> None:
        with self._cv:
            self.rejected.extend(rejections)
            self._cv.notify_all()

    def _auth(self, doc, error) -> None:
        self.auth_failures += 1

    def created(self) -> set:
        return {i for c, _, _ in self.received for i in c}

    def deleted(self) -> set:
        return {i for _, _, d in self.received for i in d}


def open_doc(make_client, server, doc_id, user_id, claim=None, **claims):
    client = make_client()
    client.wait_validated(timeout=WAIT_S)
    changes = Changes(client)
    doc = client.document_for_jwt(server.mint_token(doc_id, user_id=user_id, collaboration_permissions=claim, **claims))
    doc.download(wait=True, timeout=WAIT_S)
    return client, doc, changes


def test_without_a_claim_records_carry_their_ownership_and_no_flags(downloaded, server):
    """At the C ABI (through the bindings): without a ``collaboration_permissions`` claim every
    record handed out still carries ``createdBy``/``updatedBy``/``group`` (null when none, never
    left out), and none of the permission flags; passed back, they stay out of the content."""
    _, doc = downloaded(user_id="alice")
    imported = doc.list_annotations()  # from the PDF on the server: no user created them
    assert imported and all(set(layersync.OWNERSHIP_KEYS) <= set(r) for r in imported)
    assert all((r["createdBy"], r["updatedBy"], r["group"]) == (None, None, None) for r in imported)
    created = doc.create_annotation(note("mine"))
    assert (created["createdBy"], created["updatedBy"], created["group"]) == ("alice", "alice", None)
    assert not set(created) & set(layersync.PERMISSION_FLAG_KEYS)
    grouped = doc.create_annotation(note("in a group", group="team"))
    assert grouped["group"] == "team"
    doc.sync(wait=True, timeout=WAIT_S)
    assert doc.get_annotation(created["id"]) == created
    on_server = server.annotations(doc.id)
    assert layersync.record_content(created) == on_server[created["id"]]
    assert "group" not in on_server[grouped["id"]]  # the record's group, not part of its content
    assert doc.get_annotation(grouped["id"])["group"] == "team"  # as the server stamped it
    for record in doc.list_annotations():
        assert set(layersync.OWNERSHIP_KEYS) <= set(record) and not set(record) & set(layersync.PERMISSION_FLAG_KEYS)
    # A record handed out passed back as it is: its ownership does not go into the content.
    doc.update_annotation(dict(created, text={"format": "plain", "value": "again"}))
    doc.sync(wait=True, timeout=WAIT_S)
    assert not set(server.annotations(doc.id)[created["id"]]) & set(layersync.HANDOUT_KEYS)
    assert doc.get_annotation(created["id"])["createdBy"] == "alice"


def test_records_carry_ownership_and_flags_under_a_claim(make_client, server, uploaded):
    _, doc, _ = open_doc(make_client, server, uploaded(), "alice", LEAD)
    created = doc.create_annotation(note("mine"))
    assert (created["createdBy"], created["updatedBy"], created["group"]) == ("alice", "alice", None)
    assert created["isEditable"] and created["isDeletable"] and created["canReply"] and created["canSetGroup"]
    assert created["isFillable"] is False  # not a form field
    doc.sync(wait=True, timeout=WAIT_S)
    got = doc.get_annotation(created["id"])
    assert got["createdBy"] == "alice" and got == created
    assert layersync.record_content(got) == server.annotations(doc.id)[created["id"]]
    # A record handed out can be passed back as it is: the hand-out keys do not go into content.
    doc.update_annotation(dict(got, text={"format": "plain", "value": "again"}))
    doc.sync(wait=True, timeout=WAIT_S)
    assert not set(server.annotations(doc.id)[created["id"]]) & set(layersync.HANDOUT_KEYS)


def leads_note_seen_by_a_reviewer(make_client, server, doc_id):
    """The lead creates and syncs a note; reviewer bob opens the document: (lead, bob, the
    note as bob gets it)."""
    _, lead, _ = open_doc(make_client, server, doc_id, "lead", LEAD)
    theirs = lead.create_annotation(note("lead's"))
    lead.sync(wait=True, timeout=WAIT_S)
    _, bob, _ = open_doc(make_client, server, doc_id, "bob", REVIEWER)
    return lead, bob, bob.get_annotation(theirs["id"])


def test_reviewer_may_change_only_own_records_and_nothing_is_queued(make_client, server, uploaded):
    doc_id = uploaded()
    lead, bob, seen = leads_note_seen_by_a_reviewer(make_client, server, doc_id)
    assert seen["createdBy"] == "lead"
    assert (seen["isEditable"], seen["isDeletable"], seen["canReply"], seen["canSetGroup"]) == (False, False, True, False)
    before = bob.list_annotations()
    with pytest.raises(layersync.ForbiddenError, match="may not edit") as info:
        bob.update_annotation(dict(seen, text={"format": "plain", "value": "bob was here"}))
    assert info.value.code == layersync._ffi.LAYERSYNC_ERROR_FORBIDDEN
    with pytest.raises(layersync.ForbiddenError, match="may not delete"):
        bob.delete_annotation(seen["id"])
    with pytest.raises(layersync.ForbiddenError, match="group"):
        bob.update_annotation(dict(seen, group="elsewhere"))
    assert not bob.has_unsynced_changes and bob.list_annotations() == before
    own = bob.create_annotation(note("bob's"))
    assert own["isEditable"] and own["isDeletable"] and not own["canSetGroup"]
    bob.update_annotation(dict(own, text={"format": "plain", "value": "bob edits his own"}))
    reply = bob.create_comment(seen["id"], "a reply")
    assert reply["createdBy"] == "bob"
    bob.sync(wait=True, timeout=WAIT_S)
    assert not bob.rejected_changes()
    # The lead's root now carries bob's reply: bob still may not delete it.
    assert not bob.get_annotation(seen["id"])["isDeletable"]
    # The lead may not delete it either under delete:self of comments; with comments:*:all she may.
    lead.sync(wait=True, timeout=WAIT_S)
    assert lead.get_annotation(seen["id"])["isDeletable"]


def test_is_deletable_in_one_listing_judges_each_root_by_its_own_replies(make_client, server, uploaded):
    """``isDeletable`` of many roots handed out by one call (their replies are read in one
    query): a root is deletable when the user may delete it and each of its own live replies,
    whatever the other roots' replies are; the same answer as for one record and as a delete."""
    doc_id = uploaded()
    _, bob, _ = open_doc(make_client, server, doc_id, "bob", REVIEWER)
    bare, mine_replied, theirs_replied = (bob.create_annotation(note(t)) for t in ("bare", "bob-replied", "lead-replied"))
    bob.create_comment(mine_replied["id"], "bob's own reply")
    bob.sync(wait=True, timeout=WAIT_S)
    _, lead, _ = open_doc(make_client, server, doc_id, "lead", LEAD)
    lead.create_comment(theirs_replied["id"], "the lead's reply")
    lead.sync(wait=True, timeout=WAIT_S)
    bob.sync(wait=True, timeout=WAIT_S)
    listed = {r["id"]: r["isDeletable"] for r in bob.list_annotations()}
    expected = {bare["id"]: True, mine_replied["id"]: True, theirs_replied["id"]: False}
    assert {k: listed[k] for k in expected} == expected
    assert {k: bob.get_annotation(k)["isDeletable"] for k in expected} == expected
    with pytest.raises(layersync.ForbiddenError, match="may not delete reply"):
        bob.delete_annotation(theirs_replied["id"])
    bob.delete_annotation(mine_replied["id"])  # takes bob's own reply with it
    assert not bob.list_comments(bare["id"])


def test_reply_and_fill_need_their_permissions(make_client, server, uploaded):
    doc_id = uploaded()
    _, lead, _ = open_doc(make_client, server, doc_id, "lead", LEAD)
    root = lead.create_annotation(note("root", ))
    lead.sync(wait=True, timeout=WAIT_S)
    _, eve, _ = open_doc(make_client, server, doc_id, "eve",
                         ["annotations:view:all", "comments:view:all", "form-fields:view:all"])
    assert eve.get_annotation(root["id"])["canReply"] is False
    with pytest.raises(layersync.ForbiddenError, match="reply"):
        eve.create_comment(root["id"], "not allowed")
    with pytest.raises(layersync.ForbiddenError, match="fill"):
        eve.create_annotation({"type": "pspdfkit/form-field-value", "v": 1, "name": "field", "value": "x"})
    assert not eve.has_unsynced_changes


def _text_field(name: str, widget_id: str, group: str) -> dict:
    return {"v": 1, "type": "pspdfkit/form-field/text", "name": name, "label": name, "annotationIds": [widget_id],
            "doNotSpellCheck": False, "doNotScroll": False, "multiLine": False, "comb": False, "defaultValue": "",
            "password": False, "richText": False, "group": group}


def test_tenant_fills_the_field_the_agent_assigned_to_its_group(make_client, server, uploaded):
    """Nutrient's landlord/tenant example through the client: ``fill:group=assignedToTenant``
    fills a field in that group (``isFillable`` true on field, widget and value, the fill is
    accepted and syncs, the value in the field's group), and not a field in another group
    (``isFillable`` false, FORBIDDEN at the API, nothing queued)."""
    doc_id = uploaded()
    agent_claim = ["annotations:view:all", "form-fields:view:all", "form-fields:edit:all", "form-fields:delete:all",
                   "form-fields:fill:all", "form-fields:set-group:group=estateAgent",
                   "form-fields:set-group:group=assignedToTenant"]
    _, agent, _ = open_doc(make_client, server, doc_id, "id-1", agent_claim, default_group="estateAgent")
    fields = {}
    for name, group in (("tenant_name", "assignedToTenant"), ("landlord_sig", "estateAgent")):
        w = agent.create_annotation({"type": "pspdfkit/widget", "pageIndex": 0, "bbox": [50, 120, 100, 20],
                                     "formFieldName": name, "group": group})
        f = agent.create_annotation(_text_field(name, w["id"], group))
        fields[name] = (w["id"], f["id"])
    agent.sync(wait=True, timeout=WAIT_S)
    _, tenant, changes = open_doc(make_client, server, doc_id, "id-3",
                                  ["annotations:view:all", "form-fields:view:all",
                                   "form-fields:fill:group=assignedToTenant"])
    for name, fillable in (("tenant_name", True), ("landlord_sig", False)):
        w, f = fields[name]
        assert (tenant.get_annotation(w)["isFillable"], tenant.get_annotation(f)["isFillable"]) == (fillable, fillable)
    value = tenant.create_annotation({"v": 1, "type": "pspdfkit/form-field-value", "name": "tenant_name", "value": "Jane"})
    assert (value["group"], value["createdBy"], value["isFillable"], value["isEditable"]) == \
        ("assignedToTenant", "id-3", True, True)
    tenant.sync(wait=True, timeout=WAIT_S)
    assert not tenant.has_unsynced_changes and not changes.rejected
    agent.sync(wait=True, timeout=WAIT_S)
    seen = agent.get_annotation(value["id"])
    assert (seen["value"], seen["group"], seen["createdBy"]) == ("Jane", "assignedToTenant", "id-3")
    tenant.update_annotation({**tenant.get_annotation(value["id"]), "value": "Jane Doe"})
    with pytest.raises(layersync.ForbiddenError, match="may not fill this form field"):
        tenant.create_annotation({"v": 1, "type": "pspdfkit/form-field-value", "name": "landlord_sig", "value": "x"})
    with pytest.raises(layersync.ForbiddenError, match="may not fill"):
        tenant.update_annotation({**tenant.get_annotation(value["id"]), "name": "landlord_sig"})
    tenant.sync(wait=True, timeout=WAIT_S)
    assert not tenant.has_unsynced_changes and not changes.rejected
    agent.sync(wait=True, timeout=WAIT_S)
    assert agent.get_annotation(value["id"])["value"] == "Jane Doe"


def test_a_field_the_token_may_not_view_is_filled_by_nobody_and_unknown_to_the_client(make_client, server, uploaded):
    """``fill:all`` with ``view`` (and ``set-group``) of group g only (docs/protocol.md, "Filling a form field"): the
    field in group h never reaches the client, so the client judges its widget and a value
    naming it as it judges a value whose field is not there (by their own ownership:
    ``isFillable`` true, the create allowed offline), and the server, which has the field,
    refuses the fill: ``did_reject_changes`` forbidden, the local copy gone. A field in g is
    fillable on both sides."""
    doc_id = uploaded()
    _, agent, _ = open_doc(make_client, server, doc_id, "agent", LEAD)
    widgets = {}
    for name, field_group in (("shown", "g"), ("hidden", "h")):
        w = agent.create_annotation({"type": "pspdfkit/widget", "pageIndex": 0, "bbox": [50, 120, 100, 20],
                                     "formFieldName": name, "group": "g"})
        agent.create_annotation(_text_field(name, w["id"], field_group))
        widgets[name] = w["id"]
    agent.sync(wait=True, timeout=WAIT_S)
    _, filler, changes = open_doc(make_client, server, doc_id, "filler",
                                  ["form-fields:view:group=g", "form-fields:fill:all", "form-fields:set-group:group=g"],
                                  default_group="g")
    names = {a.get("name") for a in filler.list_annotations() if a["type"].startswith("pspdfkit/form-field/")}
    assert names == {"shown"}  # the field in h is not sent
    assert (filler.get_annotation(widgets["shown"])["isFillable"], filler.get_annotation(widgets["hidden"])["isFillable"]) \
        == (True, True)
    shown = filler.create_annotation({"v": 1, "type": "pspdfkit/form-field-value", "name": "shown", "value": "ok"})
    # named group g (else the server's answer is the value's own view: it would get the field's h)
    hidden = filler.create_annotation({"v": 1, "type": "pspdfkit/form-field-value", "name": "hidden", "value": "no",
                                       "group": "g"})
    assert (hidden["group"], hidden["isFillable"]) == ("g", True)  # judged as a value without a field
    filler.sync(wait=True, timeout=WAIT_S)
    assert [(r["id"], r["reason"]) for r in changes.rejected] == [(hidden["id"], "forbidden")]
    assert changes.rejected[0]["code"] == layersync._ffi.LAYERSYNC_ERROR_FORBIDDEN
    assert (changes.rejected[0]["local"]["value"], changes.rejected[0]["server"]) == ("no", None)
    with pytest.raises(layersync.NoSuchAnnotationError):
        filler.get_annotation(hidden["id"])
    assert not filler.has_unsynced_changes
    agent.sync(wait=True, timeout=WAIT_S)
    assert agent.get_annotation(shown["id"])["value"] == "ok"
    with pytest.raises(layersync.NoSuchAnnotationError):
        agent.get_annotation(hidden["id"])


def test_default_group_get_set_reset_and_persisted(make_client, server, uploaded, tmp_path):
    doc_id = uploaded()
    storage = tmp_path / "dg"
    client = make_client(storage_path=storage)
    token = server.mint_token(doc_id, user_id="ann", default_group="team",
                              collaboration_permissions=["annotations:*:group=team", "annotations:view:all",
                                                         "annotations:set-group:group=drafts"])
    doc = client.document_for_jwt(token)
    doc.download(wait=True, timeout=WAIT_S)
    assert doc.default_group == "team"
    assert doc.create_annotation(note("in team"))["group"] == "team"
    doc.default_group = "drafts"
    assert doc.default_group == "drafts"
    made = doc.create_annotation(note("in drafts"))
    assert made["group"] == "drafts" and made["createdBy"] == "ann"
    doc.default_group = "secret"  # no set-group for it: creating there is refused
    with pytest.raises(layersync.ForbiddenError, match="group 'secret'"):
        doc.create_annotation(note("nope"))
    doc.default_group = "drafts"
    client.close()
    client = make_client(storage_path=storage)
    doc = client.document_for_jwt(token)
    assert doc.default_group == "drafts"  # kept in the local store
    doc.sync(wait=True, timeout=WAIT_S)
    groups = {r["content"]["text"]["value"]: r["group"]
              for r in server.admin_json(f"/api/documents/{doc_id}/annotations")["data"]["annotations"]}
    assert groups["in drafts"] == "drafts" and groups["in team"] == "team"
    doc.default_group = None
    assert doc.default_group == "team"
    with pytest.raises(layersync.InvalidArgumentError):
        doc.default_group = ""


def test_malformed_claim_is_invalid_jwt_offline(make_client, server, uploaded):
    def part(obj) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
    token = ".".join([part({"alg": "RS256"}), part({"document_id": "d", "collaboration_permissions":
                                                    ["annotations:view:all", "annotations:fill:all"]}), "c2ln"])
    client = make_client()
    with pytest.raises(layersync.InvalidJWTError, match="annotations:fill:all"):
        client.document_for_jwt(token)


def test_reauth_widening_and_narrowing_make_records_appear_and_disappear(make_client, server, uploaded):
    doc_id = uploaded()
    _, lead, _ = open_doc(make_client, server, doc_id, "lead", LEAD)
    public = lead.create_annotation(note("for everyone", group="public"))
    private = lead.create_annotation(note("internal", group="private"))
    lead.sync(wait=True, timeout=WAIT_S)
    _, guest, changes = open_doc(make_client, server, doc_id, "guest", GUEST)
    ids = {r["id"] for r in guest.list_annotations()}
    assert public["id"] in ids and private["id"] not in ids
    with pytest.raises(layersync.NoSuchAnnotationError):
        guest.get_annotation(private["id"])
    guest.reauthenticate(server.mint_token(doc_id, user_id="guest", collaboration_permissions=["annotations:view:all"]))
    assert private["id"] in changes.created()
    assert guest.get_annotation(private["id"])["group"] == "private"
    guest.reauthenticate(server.mint_token(doc_id, user_id="guest", collaboration_permissions=GUEST))
    assert private["id"] in changes.deleted() and public["id"] not in changes.deleted()
    ids = {r["id"] for r in guest.list_annotations()}
    assert public["id"] in ids and private["id"] not in ids
    guest.sync(wait=True, timeout=WAIT_S)  # nothing left to reconcile
    assert private["id"] not in {r["id"] for r in guest.list_annotations()}


def test_narrowing_drops_queued_edits_of_records_that_disappear_as_forbidden(make_client, server, uploaded):
    doc_id = uploaded()
    _, lead, _ = open_doc(make_client, server, doc_id, "lead", LEAD)
    private = lead.create_annotation(note("internal", group="private"))
    lead.sync(wait=True, timeout=WAIT_S)
    client, doc, changes = open_doc(make_client, server, doc_id, "lead2", LEAD)
    client.set_network_available(False)
    doc.update_annotation(dict(doc.get_annotation(private["id"]), text={"format": "plain", "value": "queued"}))
    client.set_network_available(True)
    doc.reauthenticate(server.mint_token(doc_id, user_id="lead2", collaboration_permissions=GUEST))
    assert private["id"] in changes.deleted() and not doc.has_unsynced_changes
    report = [r for r in doc.rejected_changes() if r["id"] == private["id"]]
    assert report and report[0]["reason"] == "forbidden" and report[0]["code"] == layersync._ffi.LAYERSYNC_ERROR_FORBIDDEN
    assert report[0]["local"]["text"]["value"] == "queued"


def test_a_change_the_server_forbids_in_a_1000_change_batch_is_rejected_alone(make_client, server, uploaded):
    doc_id = uploaded()
    _, lead, _ = open_doc(make_client, server, doc_id, "lead", LEAD)
    target = lead.create_annotation(note("public one", group="public"))
    lead.sync(wait=True, timeout=WAIT_S)
    client, doc, changes = open_doc(make_client, server, doc_id, "rita",
                                    ["annotations:view:all", "annotations:edit:group=public", "annotations:edit:self"])
    made = [doc.create_annotation(note(f"rita {i}"))["id"] for i in range(500)]
    doc.update_annotation(dict(doc.get_annotation(target["id"]), text={"format": "plain", "value": "rita's edit"}))
    made += [doc.create_annotation(note(f"rita {i}"))["id"] for i in range(500, 999)]
    # Meanwhile the lead moves the record out of the public group (the client still allows it).
    current = server.admin_json(f"/api/documents/{doc_id}/annotations/{target['id']}")
    server.admin_request(f"/api/documents/{doc_id}/annotations/{target['id']}", method="PUT",
                         json_body={"content": current["content"], "group": "private"})
    assert server.admin_json(f"/api/documents/{doc_id}/annotations/{target['id']}")["group"] == "private"
    doc.sync(wait=True, timeout=WAIT_S)
    assert [r["id"] for r in changes.rejected] == [target["id"]]
    assert changes.rejected[0]["reason"] == "forbidden"
    assert changes.rejected[0]["code"] == layersync._ffi.LAYERSYNC_ERROR_FORBIDDEN
    assert set(made) <= set(server.annotations(doc_id))
    back = doc.get_annotation(target["id"])
    assert back["text"]["value"] == "public one" and back["group"] == "private" and not back["isEditable"]
    assert not doc.has_unsynced_changes


def test_forbidden_rollback_is_not_an_authentication_failure(make_client, server, uploaded):
    doc_id = uploaded()
    _, lead, _ = open_doc(make_client, server, doc_id, "lead", LEAD)
    target = lead.create_annotation(note("v1"))
    lead.sync(wait=True, timeout=WAIT_S)
    lead.update_annotation(dict(lead.get_annotation(target["id"]), text={"format": "plain", "value": "v2"}))
    lead.sync(wait=True, timeout=WAIT_S)
    _, bob, changes = open_doc(make_client, server, doc_id, "bob", REVIEWER)
    first = bob.annotation_history(target["id"])[-1]
    with pytest.raises(layersync.ForbiddenError):
        bob.rollback_annotation(target["id"], first["revision"])
    assert changes.auth_failures == 0
    bob.create_annotation(note("still syncing"))
    bob.sync(wait=True, timeout=WAIT_S)  # the token stays good
    assert changes.auth_failures == 0 and not bob.has_unsynced_changes


# -- reviewer findings (issue 14, round 4) --------------------------------------------------


def raw(server, method, path, token, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json",
                                          "LayerSync-Protocol": "1"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def comment(root_id, text="reply"):
    return {"v": 2, "type": "pspdfkit/comment", "rootId": root_id, "pageIndex": 0,
            "text": {"format": "plain", "value": text},
            "createdAt": "2025-01-02T00:00:00Z", "updatedAt": "2025-01-02T00:00:00Z"}


# Reply permission: a user who may reply only in public threads, edit their own comments.
PUBLIC_REPLIER = ["annotations:view:all", "comments:view:all", "comments:reply:group=public",
                  "comments:edit:self", "annotations:edit:self"]


def test_moving_own_comment_into_a_thread_without_reply_permission_is_refused(make_client, server, uploaded):
    """Bug: an update that changes a comment's rootId is checked only for `edit`, so a user moves
    their comment into a thread they may not reply to (client API accepts it, server accepts it)."""
    doc_id = uploaded()
    _, lead, _ = open_doc(make_client, server, doc_id, "lead", LEAD)
    public = lead.create_annotation(note("public root", group="public"))
    private = lead.create_annotation(note("private root", group="private"))
    lead.sync(wait=True, timeout=WAIT_S)
    _, pat, changes = open_doc(make_client, server, doc_id, "pat", PUBLIC_REPLIER, default_group="public")
    with pytest.raises(layersync.ForbiddenError):
        pat.create_comment(private["id"], "not allowed here")  # holds: reply is checked on create
    mine = pat.create_comment(public["id"], "allowed here")
    pat.sync(wait=True, timeout=WAIT_S)
    moved = dict(pat.get_annotation(mine["id"]), rootId=private["id"])
    try:
        pat.update_annotation(moved)
    except layersync.ForbiddenError:
        return  # fixed on the client; (server checked in the raw test below)
    pat.sync(wait=True, timeout=WAIT_S)
    lead.sync(wait=True, timeout=WAIT_S)
    on_server = lead.get_annotation(mine["id"])
    assert on_server["rootId"] != private["id"], "comment now sits in a thread pat may not reply to"


def test_server_refuses_a_rootid_change_into_a_thread_without_reply(server, uploaded):
    """Bug: POST .../sync accepts an update moving a comment (rootId) into a thread the token has
    no `reply` on; only `edit` of the comment is checked."""
    doc_id = uploaded()
    lead_t = server.mint_token(doc_id, user_id="lead", collaboration_permissions=LEAD)
    url = f"/sync/v1/documents/{doc_id}/layers/~/sync"
    st, body = raw(server, "POST", url, lead_t, {"epoch": None, "since": 0, "changes": [
        {"change_id": "c1", "op": "create", "id": "pubroot", "content": note("p"), "group": "public"},
        {"change_id": "c2", "op": "create", "id": "privroot", "content": note("q"), "group": "private"}]})
    assert st == 200, body
    pat_t = server.mint_token(doc_id, user_id="pat", collaboration_permissions=PUBLIC_REPLIER)
    st, body = raw(server, "POST", url, pat_t, {"epoch": None, "since": 0, "changes": [
        {"change_id": "c3", "op": "create", "id": "cm1", "content": comment("pubroot")}]})
    answer = json.loads(body)
    assert answer["accepted"], answer
    rev = answer["accepted"][0]["revision"]
    st, body = raw(server, "POST", url, pat_t, {"epoch": None, "since": 0, "changes": [
        {"change_id": "c4", "op": "update", "id": "cm1", "base_revision": rev,
         "content": comment("privroot")}]})
    answer = json.loads(body)
    assert answer["rejected"] and answer["rejected"][0]["reason"] == "forbidden", answer


def test_a_non_comment_with_rootid_cannot_bypass_reply_permission(server, uploaded):
    """Bug: a non-comment record (e.g. a note) may carry rootId into any thread, even one the user
    cannot view, without `reply`; it then counts as a reply (cascade-deleted, blocks delete:self)."""
    doc_id = uploaded()
    url = f"/sync/v1/documents/{doc_id}/layers/~/sync"
    bob_t = server.mint_token(doc_id, user_id="bob", collaboration_permissions=REVIEWER)
    st, body = raw(server, "POST", url, bob_t, {"epoch": None, "since": 0, "changes": [
        {"change_id": "b1", "op": "create", "id": "bobroot", "content": note("bob's own")}]})
    bob_rev = json.loads(body)["accepted"][0]["revision"]
    # A guest that may view only public records (and may write) squats on bob's thread.
    guest_t = server.mint_token(doc_id, user_id="gus", collaboration_permissions=GUEST)
    st, body = raw(server, "POST", url, guest_t, {"epoch": None, "since": 0, "changes": [
        {"change_id": "g1", "op": "create", "id": "squat", "content": note("x", rootId="bobroot")}]})
    squat = json.loads(body)
    # bob may no longer delete his own annotation, because of a record by someone he cannot
    # hold delete on, created by a user who could not even view the root.
    st, body = raw(server, "POST", url, bob_t, {"epoch": None, "since": 0, "changes": [
        {"change_id": "b2", "op": "delete", "id": "bobroot", "base_revision": bob_rev}]})
    deleted = json.loads(body)
    assert squat["rejected"] or deleted["accepted"], (squat, deleted)


def test_a_no_op_update_without_edit_does_not_stamp_updatedby(make_client, server, uploaded):
    """Bug: a reviewer without `edit` on a record can pass it back unchanged through
    update_annotation; nothing refuses it, the server accepts it and stamps updatedBy=bob."""
    doc_id = uploaded()
    lead, bob, seen = leads_note_seen_by_a_reviewer(make_client, server, doc_id)
    assert not seen["isEditable"]
    try:
        bob.update_annotation(seen)
    except layersync.ForbiddenError:
        return
    bob.sync(wait=True, timeout=WAIT_S)
    record = server.admin_json(f"/api/documents/{doc_id}/annotations/{seen['id']}")
    assert record["updatedBy"] == "lead", record


def test_creator_name_is_forced_on_updates_too(make_client, server, uploaded):
    """Bug: `creator_name` is forced only on create; an update can set creatorName to anyone
    (a reviewer signs their note as the lead), on the client API and on the server."""
    doc_id = uploaded()
    _, bob, _ = open_doc(make_client, server, doc_id, "bob", REVIEWER, creator_name="Bob B")
    mine = bob.create_annotation(note("mine", creatorName="Someone Else"))
    assert mine["creatorName"] == "Bob B"  # holds on create
    bob.sync(wait=True, timeout=WAIT_S)
    bob.update_annotation(dict(bob.get_annotation(mine["id"]), creatorName="The Lead"))
    bob.sync(wait=True, timeout=WAIT_S)
    assert server.annotations(doc_id)[mine["id"]]["creatorName"] == "Bob B"


def _signed(server, doc_id, claim_value, **extra):
    import jwt as pyjwt
    from cryptography.hazmat.primitives import serialization
    key = serialization.load_pem_private_key(server.private_key.read_bytes(), password=None)
    return pyjwt.encode({"document_id": doc_id, "user_id": "mal", "collaboration_permissions": claim_value,
                         **extra}, key, algorithm="ES256")


def test_forbidden_root_delete_does_not_name_a_reply_the_user_cannot_view(server, uploaded):
    """Bug (low): deleting one's own root is refused naming a private reply's id the user may not
    view (`may not delete reply <id>`), leaking an invisible record; the client had said isDeletable."""
    doc_id = uploaded()
    url = f"/sync/v1/documents/{doc_id}/layers/~/sync"
    claim = ["annotations:view:all", "annotations:delete:self", "comments:view:group=public",
             "comments:delete:self"]
    bob_t = server.mint_token(doc_id, user_id="bob", collaboration_permissions=claim)
    st, body = raw(server, "POST", url, bob_t, {"epoch": None, "since": 0, "changes": [
        {"change_id": "b1", "op": "create", "id": "bobroot", "content": note("bob's")}]})
    rev = json.loads(body)["accepted"][0]["revision"]
    lead_t = server.mint_token(doc_id, user_id="lead", collaboration_permissions=LEAD)
    raw(server, "POST", url, lead_t, {"epoch": None, "since": 0, "changes": [
        {"change_id": "l1", "op": "create", "id": "secret-reply-id", "content": comment("bobroot"),
         "group": "private"}]})
    st, body = raw(server, "POST", url, bob_t, {"epoch": None, "since": 0, "changes": [
        {"change_id": "b2", "op": "delete", "id": "bobroot", "base_revision": rev}]})
    answer = json.loads(body)
    assert "secret-reply-id" not in json.dumps(answer["rejected"]), answer["rejected"]


# -- breaker findings (issue 14, brk14) ------------------------------------------------------

def _get_records(server, doc_id, token):
    st, body = raw(server, "GET", f"/sync/v1/documents/{doc_id}/layers/~/records?since=0", token)
    return st, json.loads(body or b"null")


def test_a_mark_after_the_scope_equals_sign_is_valid_on_both_sides(make_client, server, uploaded):
    """``group=\\u0301x``: the server compares code points (200); the client used to find no
    ``=`` (Swift's ``Character`` merges it with the accent) and refused the JWT."""
    doc_id = uploaded()
    token = _signed(server, doc_id, ["annotations:view:group=\u0301x"])
    assert _get_records(server, doc_id, token)[0] == 200
    client = make_client()
    client.document_for_jwt(token)  # no InvalidJWTError


def test_a_lone_surrogate_in_the_claim_is_refused_on_both_sides(make_client, server, uploaded):
    """A lone surrogate (``"\\ud800"`` in the payload's JSON) is no Unicode text: no client
    string can hold it, so the server refuses it too (403, the reason named) rather than
    serving a token the client cannot read."""
    doc_id = uploaded()
    token = _signed(server, doc_id, ["annotations:view:group=\ud800"])
    st, body = _get_records(server, doc_id, token)
    assert st == 403 and "lone surrogate" in body["error"]["message"], body
    client = make_client()
    with pytest.raises(layersync.InvalidJWTError, match="lone surrogate"):
        client.document_for_jwt(token)


def test_canonically_equivalent_group_names_are_different_groups(make_client, server, uploaded):
    """A record in group ``"cafe\\u0301"`` (NFD) under a grant of ``group=caf\\u00e9`` (NFC):
    the server compares code points and forbids the edit; the client used Swift's ``==``
    (canonical equivalence), showed ``isEditable`` true and queued an edit that bounced."""
    doc_id = uploaded()
    _, lead, _ = open_doc(make_client, server, doc_id, "lead", LEAD)
    rec = lead.create_annotation(note("nfd", group="cafe\u0301"))
    lead.sync(wait=True, timeout=WAIT_S)
    _, eve, _ = open_doc(make_client, server, doc_id, "eve", ["annotations:view:all", "annotations:edit:group=caf\u00e9"])
    got = eve.get_annotation(rec["id"])
    assert got["group"] == "cafe\u0301" and got["isEditable"] is False, got
    with pytest.raises(layersync.ForbiddenError):
        eve.update_annotation(dict(got, text={"format": "plain", "value": "eve"}))
    assert not eve.rejected_changes()


def test_an_over_long_jwt_is_refused_offline_and_by_the_server(make_client, server, uploaded):
    """A ~1 MB JWT (25,000 claim entries) used to pass offline and then fail every request
    with REQUEST_FAILED "Out of memory" (libcurl's request limit), which looks offline forever.
    Both sides refuse a JWT over 65,536 bytes: INVALID_JWT naming the limit, and 431."""
    doc_id = uploaded()
    claim = ["annotations:view:group=g%05d" % i for i in range(25000)] + ["annotations:view:all"]
    token = _signed(server, doc_id, claim)
    st, body = _get_records(server, doc_id, token)
    assert st == 431 and body["error"]["code"] == "token_too_large" and "65536" in body["error"]["message"], body
    client = make_client()
    client.wait_validated(timeout=WAIT_S)
    with pytest.raises(layersync.InvalidJWTError, match="65536"):
        client.document_for_jwt(token)
    _, doc = open_doc(make_client, server, doc_id, "u", ["annotations:view:all"])[:2]
    with pytest.raises(layersync.InvalidJWTError, match="65536"):
        doc.reauthenticate(token)
    # Just under the limit: accepted on both sides (a token of 65,536 bytes works end to end).
    small = _signed(server, doc_id, ["annotations:view:group=g%05d" % i for i in range(1500)])
    assert len(small) <= 65536 and _get_records(server, doc_id, small)[0] == 200
    make_client().document_for_jwt(small).download(wait=True, timeout=WAIT_S)


def test_a_cached_attachment_of_a_record_no_longer_visible_is_not_found(make_client, server, uploaded, tmp_path):
    """After a narrowing reauthentication the private image record disappears, and so does its
    attachment: the local read answers NO_SUCH_ATTACHMENT as the server answers 404 (a live
    record the token may view must mention the hash), instead of the cached bytes."""
    doc_id = uploaded()
    client = make_client(storage_path=tmp_path / "s")
    client.wait_validated(timeout=WAIT_S)
    doc = client.document_for_jwt(server.mint_token(doc_id, user_id="lead", collaboration_permissions=LEAD))
    doc.download(wait=True, timeout=WAIT_S)
    sha = doc.add_attachment(b"PRIVATE-BYTES", "application/octet-stream")
    assert doc.attachment_data(sha) == b"PRIVATE-BYTES"  # added here, not uploaded yet: the user's own bytes
    doc.create_annotation({"type": "pspdfkit/image", "pageIndex": 0, "bbox": [1, 1, 5, 5], "imageAttachmentId": sha,
                           "contentType": "image/png", "group": "private"})
    doc.sync(wait=True, timeout=WAIT_S)
    assert doc.attachment_data(sha) == b"PRIVATE-BYTES"  # its record is visible
    guest = server.mint_token(doc_id, user_id="lead", collaboration_permissions=GUEST)
    doc.reauthenticate(guest)
    doc.sync(wait=True, timeout=WAIT_S)
    assert all(r.get("imageAttachmentId") != sha for r in doc.list_annotations())
    with pytest.raises(layersync.NoSuchAttachmentError):
        doc.attachment_data(sha)
    with pytest.raises(layersync.NoSuchAttachmentError):
        doc.download_attachment(sha, wait=True, timeout=WAIT_S)
    st, _ = raw(server, "GET", f"/sync/v1/documents/{doc_id}/attachments/{sha}", guest)
    assert st == 404  # the server's answer, mirrored


def test_a_group_name_with_a_comma_is_one_entry_of_the_claim(make_client, server, uploaded):
    """DevServer.mint_token passes each entry whole (layersync-server mint-token
    --collaboration-permission): a group "Smith, Jones" is one entry, not two."""
    doc_id = uploaded()
    _, lead, _ = open_doc(make_client, server, doc_id, "lead", LEAD)
    inside = lead.create_annotation(note("for the firm", group="Smith, Jones"))
    lead.create_annotation(note("for Smith alone", group="Smith"))
    lead.sync(wait=True, timeout=WAIT_S)
    token = server.mint_token(doc_id, user_id="clerk", collaboration_permissions=["annotations:view:group=Smith, Jones"])
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["collaboration_permissions"] == ["annotations:view:group=Smith, Jones"]
    _, clerk, _ = open_doc(make_client, server, doc_id, "clerk", ["annotations:view:group=Smith, Jones"])
    assert [r["id"] for r in clerk.list_annotations() if r.get("group") is not None] == [inside["id"]]
