#!/usr/bin/env python3
"""Writes tests/permission-cases.json: the collaboration-permission decisions of the
server's rules (server/layersync_server/permissions.py) over a matrix of content type x
action x scope x record ownership, plus change cases (create, update, group change, delete
of a root with replies) and malformed claims. The engine's Swift tests
(Tests/LayerSyncCoreTests/CollaborationPermissionsTests.swift) check the client's evaluator
(LayerSyncModel/CollaborationPermissions.swift) against every case, and
bindings/python/tests/test_permission_parity.py checks the file still is what the server
decides, so the two sides cannot drift apart.

    python3 tools/gen_permission_cases.py [--check]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "server"))
from layersync_server import permissions as P  # noqa: E402

OUT = REPO / "tests" / "permission-cases.json"
USER = "me"
TYPES = {"annotations": "pspdfkit/note", "comments": "pspdfkit/comment", "form-fields": "pspdfkit/widget",
         "value": "pspdfkit/form-field-value", "untyped": None, "bookmark": "pspdfkit/bookmark",
         # a combining mark after the prefix's "/" (one Swift Character with it): still a form field
         "combining": "pspdfkit/form-field/\u0301x"}
SCOPES = ["all", "self", "group=g", "createdBy=other"]
OWNERS = [(USER, None), (USER, "g"), ("other", None), ("other", "g"), ("third", "h"), (None, None),
          # canonically equivalent to names of the Unicode claims (NFD of "José", "café"; KELVIN
          # SIGN for "K"), not the same code points: the server tells them apart, and so must Swift
          ("Jose\u0301", None), (None, "cafe\u0301"), (None, "\u212a")]
#: Claims naming the NFC (or ASCII) twins of those owners, and a name that starts with a mark.
UNICODE_CLAIMS = [["annotations:*:group=caf\u00e9", "comments:*:createdBy=Jos\u00e9", "form-fields:*:group=K"],
                  ["annotations:*:group=cafe\u0301", "annotations:*:createdBy=Jose\u0301", "form-fields:*:group=\u212a"],
                  ["annotations:view:group=\u0301x", "annotations:*:group=\u212a"]]


def record(record_type, created_by, group, rid="r"):
    content = {"id": rid} if record_type is None else {"id": rid, "type": record_type}
    return SimpleNamespace(id=rid, content=content, created_by=created_by, group=group, deleted=False)


def grant(claim, permissions=("read-document", "write"), default_group=None, user=USER):
    return SimpleNamespace(collaboration=P.parse_claim(claim), user_id=user, permissions=list(permissions),
                           default_group=default_group)


def claims():
    out = [None, []]
    for content_type in P.CONTENT_TYPES:
        for action in P.ACTIONS[content_type] + ("*",):
            for scope in SCOPES:
                entry = f"{content_type}:{action}:{scope}"
                out.append([entry] if action == "view" else [f"{content_type}:view:all", entry])
    out.append(["annotations:view:self", "annotations:edit:all"])  # edit without view of others
    out.append(["annotations:*:group=g", "annotations:*:createdBy=other"])
    return out + UNICODE_CLAIMS


ACTIONS = ("view", "edit", "delete", "reply", "fill", "set-group")


def allows_cases():
    """One case per claim: ``decisions`` holds one character per (type, action, owner) of the
    file's ``matrix`` (types x actions x owners, in that nesting), ``1`` = allowed."""
    cases = []
    for claim in claims():
        parsed = P.parse_claim(claim)
        bits = "".join("1" if P.allows(parsed, USER, action, record_type, created_by, group) else "0"
                       for record_type in TYPES.values() for action in ACTIONS for created_by, group in OWNERS)
        cases.append({"claim": claim, "decisions": bits})
    return cases


GRANT_CLAIMS = [None, ["annotations:*:all", "comments:*:all", "form-fields:*:all"],
                ["annotations:view:all", "annotations:edit:self", "annotations:delete:self", "comments:view:all",
                 "comments:reply:all", "comments:delete:self", "form-fields:view:all", "form-fields:fill:self"],
                ["annotations:view:all", "annotations:set-group:group=g", "annotations:set-group:group=h",
                 "comments:view:group=g", "comments:reply:group=g"],
                ["annotations:view:group=public", "comments:view:group=public"],
                ["annotations:*:self", "comments:*:self", "form-fields:*:self"],
                # Instant's landlord/tenant: fill scoped by the form field's group, or its creator
                ["annotations:view:all", "form-fields:view:all", "form-fields:fill:group=g"],
                ["form-fields:view:all", "form-fields:fill:createdBy=other"],
                # fill of every field, view of those in g only: a field the token may not view
                # (the user's in no group, the third's in h) fills no value (fill needs its view)
                ["form-fields:view:group=g", "form-fields:fill:all", "form-fields:set-group:group=g"],
                ["annotations:view:all", "annotations:edit:all", "annotations:set-group:group=caf\u00e9"]]


def owner(rec):
    if rec is None:
        return None
    return {"type": rec.content.get("type"), "createdBy": rec.created_by, "group": rec.group}


#: A value's form field: none known, the user's, another user's in group g, a third's in h.
FIELDS = [None, record("pspdfkit/form-field/text", USER, None, "field"),
          record("pspdfkit/form-field/text", "other", "g", "field"),
          record("pspdfkit/form-field/text", "third", "h", "field")]


def change_cases():
    """Grants (claim, ``write``, ``default_group``), each with the changes it is asked about and
    the server's answer: ``forbidden`` is its message, or null when allowed."""
    grants = []
    for claim in GRANT_CLAIMS:
        for write in (True, False):
            for default_group in (None, "g"):
                g = grant(claim, ("read-document", "write") if write else ("read-document",), default_group)
                cases = create_cases(g)
                if write and default_group is None:  # the other two only matter to creates
                    cases += update_cases(g) + delete_cases(g)
                grants.append({"claim": claim, "write": write, "default_group": default_group, "cases": cases})
    # Group names compared by code points: a create in "cafe\u0301" is not one in the default
    # group "caf\u00e9" (it needs set-group), moving a record between the two is a group change.
    for claim in (["annotations:view:all"], ["annotations:*:all"], GRANT_CLAIMS[-1]):
        g = grant(claim, default_group="caf\u00e9")
        cases = []
        for group in ("caf\u00e9", "cafe\u0301"):
            why = P.forbidden_change(g, "create", None, {"id": "n", "type": TYPES["annotations"]}, group, True)
            cases.append({"op": "create", "type": TYPES["annotations"], "group_given": True, "group": group,
                          "root": None, "forbidden": why})
        for current_group, new_group in (("caf\u00e9", "cafe\u0301"), ("cafe\u0301", "caf\u00e9"), ("g", "cafe\u0301")):
            current = record(TYPES["annotations"], USER, current_group)
            for changed in (False, True):
                content = dict(current.content, text="new") if changed else dict(current.content)
                why = P.forbidden_change(g, "update", current, content, new_group, True)
                cases.append({"op": "update", "current": owner(current), "content_changed": changed,
                              "type": TYPES["annotations"], "group_given": True, "group": new_group, "forbidden": why})
        grants.append({"claim": claim, "write": True, "default_group": "caf\u00e9", "cases": cases})
    return grants


def create_cases(g):
    cases = []
    roots = [None, record(TYPES["annotations"], USER, None, "root"), record(TYPES["annotations"], "other", "g", "root"),
             record(TYPES["annotations"], "other", "public", "root")]
    for type_name in ("annotations", "value", "comments"):
        record_type = TYPES[type_name]
        for group_given, group in ((False, None), (True, "g"), (True, "h"), (True, None)):
            for root in roots if type_name == "comments" else [None]:
                why = P.forbidden_change(g, "create", None, {"id": "n", "type": record_type}, group, group_given, root=root)
                cases.append({"op": "create", "type": record_type, "group_given": group_given, "group": group,
                              "root": None if root is None else owner(root), "forbidden": why})
    # A form field value: `fill` is judged by its form field (the field's createdBy and group) and
    # the value inherits the field's group; with no field known, by the value itself (above).
    for field in FIELDS:
        for group_given, group in ((False, None), (True, "g"), (True, "h"), (True, None)):
            content = {"id": "n", "type": TYPES["value"], "name": "f"}
            why = P.forbidden_change(g, "create", None, content, group, group_given, field=field)
            cases.append({"op": "create", "type": TYPES["value"], "group_given": group_given, "group": group,
                          "root": None, "field": owner(field), "forbidden": why})
    # A record of any type with a rootId is a reply (it needs `reply` on the thread).
    for type_name in ("annotations", "value", "untyped"):
        record_type = TYPES[type_name]
        for root in roots:
            content = {"id": "n", "rootId": "root"} if record_type is None else {"id": "n", "type": record_type, "rootId": "root"}
            why = P.forbidden_change(g, "create", None, content, None, False, root=root)
            cases.append({"op": "create", "type": record_type, "group_given": False, "group": None, "root_given": True,
                          "root": None if root is None else owner(root), "forbidden": why})
    return cases


def update_cases(g):
    cases = []
    for type_name in ("annotations", "value", "comments"):
        other_type = TYPES["comments"] if type_name != "comments" else TYPES["annotations"]
        for created_by, group in OWNERS[:5]:
            current = record(TYPES[type_name], created_by, group)
            for changed, new_type in ((True, TYPES[type_name]), (False, TYPES[type_name]), (True, other_type)):
                for group_given, new_group in ((False, None), (True, group), (True, "g"), (True, "h"), (True, None)):
                    content = dict(current.content, type=new_type)
                    if changed:
                        content["text"] = "new"
                    why = P.forbidden_change(g, "update", current, content, new_group, group_given)
                    cases.append({"op": "update", "current": owner(current), "content_changed": changed, "type": new_type,
                                  "group_given": group_given, "group": new_group, "forbidden": why})
    # A value's update is a fill of its form field (the stored name's; a new name's field too).
    for created_by, group in OWNERS[:5]:
        current = record(TYPES["value"], created_by, group)
        current.content["name"] = "f"
        for field in FIELDS:
            for renamed, new_field in ((False, None), (True, None), (True, FIELDS[1]), (True, FIELDS[2])):
                for changed, group_given, new_group in ((True, False, None), (False, False, None), (False, True, "g")):
                    if renamed and not changed:
                        continue
                    content = dict(current.content, value="new") if changed else dict(current.content)
                    if renamed:
                        content["name"] = "f2"
                    why = P.forbidden_change(g, "update", current, content, new_group, group_given, field=field,
                                             new_field=new_field)
                    cases.append({"op": "update", "current": owner(current), "content_changed": changed,
                                  "type": TYPES["value"], "group_given": group_given, "group": new_group,
                                  "field": owner(field), "renamed": renamed, "new_field": owner(new_field),
                                  "forbidden": why})
    # An update that sets or changes rootId moves the record into a thread: `reply` there too.
    roots = [None, record(TYPES["annotations"], USER, None, "root"), record(TYPES["annotations"], "other", "g", "root"),
             record(TYPES["annotations"], "other", "public", "root")]
    for type_name in ("comments", "annotations"):
        for created_by, group in OWNERS[:3]:
            current = record(TYPES[type_name], created_by, group)
            current.content["rootId"] = "old-root"
            for root in roots:
                content = dict(current.content, rootId="root")
                why = P.forbidden_change(g, "update", current, content, None, False, root=root)
                cases.append({"op": "update", "current": owner(current), "content_changed": True, "type": TYPES[type_name],
                              "group_given": False, "group": None, "moves_thread": True,
                              "root": None if root is None else owner(root), "forbidden": why})
    return cases


def delete_cases(g):
    """Deleting a root takes its live replies with it (the safe reading of Instant's rule)."""
    cases = []
    for created_by, group in OWNERS[:5]:
        current = record(TYPES["annotations"], created_by, group, "root")
        for replies in ([], [record(TYPES["comments"], USER, None, "c1")],
                        [record(TYPES["comments"], USER, None, "c1"), record(TYPES["comments"], "other", "g", "c2")],
                        [record(TYPES["comments"], "other", "public", "c3"), record(TYPES["comments"], "third", "h", "c4")]):
            why = P.forbidden_change(g, "delete", current, None, None, False, children=replies)
            cases.append({"op": "delete", "current": owner(current),
                          "replies": [dict(owner(r), id=r.id) for r in replies], "forbidden": why})
    return cases


MALFORMED = ["annotations:view", "annotations:view:all:extra:x", "widgets:view:all", "annotations:reply:all",
             "annotations:fill:all", "comments:fill:all", "form-fields:reply:all", "annotations:view:group=",
             "annotations:view:everyone", "annotations:view:createdBy=", "annotations::all", "annotations:view:owner=x",
             "Annotations:view:all", ""]


def malformed_cases():
    cases = []
    for entry in MALFORMED:
        try:
            P.parse_claim(["annotations:view:all", entry])
            ok = True
        except P.ClaimError:
            ok = False
        cases.append({"claim": ["annotations:view:all", entry], "entry": entry, "valid": ok})
    # On code points: a mark after ":" or "=" does not hide it (one Swift Character with it),
    # and a mark on a keyword spoils the keyword.
    unicode = (["annotations:view:group=\u0301x"], ["annotations:view:createdBy=\u0301"], ["annotations:view:group=:\u0301"],
               ["annotations:\u0301view:all"], ["annotations\u0301:view:all"], ["annotations:view:all\u0301"],
               ["annotations:view:group\u0301=x"], ["annotations:*\u0301:all"], ["annotations:view:self\u0301"])
    for claim in (["annotations:view:group=a=b"], ["annotations:view:createdBy=x:y"], ["comments:*:self"], *unicode):
        try:
            valid = P.parse_claim(claim) is not None
        except P.ClaimError:
            valid = False
        cases.append({"claim": claim, "entry": claim[0], "valid": valid})
    return cases


def build() -> str:
    data = {"about": "Generated by tools/gen_permission_cases.py from server/layersync_server/permissions.py; "
                     "do not edit. user_id of every case: " + USER,
            "user_id": USER,
            "matrix": {"types": list(TYPES.values()), "actions": list(ACTIONS),
                       "owners": [{"createdBy": c, "group": g} for c, g in OWNERS]},
            "allows": allows_cases(), "changes": change_cases(), "claims": malformed_cases()}
    return json.dumps(data, indent=None, separators=(",", ":")) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="exit 1 when the file differs from the server's rules")
    args = ap.parse_args()
    text = build()
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT} is not what the server's rules decide: run tools/gen_permission_cases.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
