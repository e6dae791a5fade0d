/* Collaboration permissions at the C ABI (docs/protocol.md "Collaboration permissions"):
 * records carry their ownership and flags, a forbidden edit is refused at once with
 * LAYERSYNC_ERROR_FORBIDDEN and nothing queued (offline: the check is the engine's, the
 * server is not asked), and the default group is set, read and reset. The records come from
 * the real server (alice's and bob's); the restricted token is built offline (its signature
 * is never checked by the engine, and nothing is sent with it). */
#include "ls_test.h"

#include <stdlib.h>
#include <string.h>

#define NOTE(id, text) "{\"id\":\"" id "\",\"type\":\"pspdfkit/note\",\"pageIndex\":0,\"bbox\":[1,2,3,4]," \
    "\"text\":{\"format\":\"plain\",\"value\":\"" text "\"},\"icon\":\"comment\"}"

static json_t *get(layersync_document *document, const char *id)
{
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;
    CHECK_OK(layersync_document_get_annotation(document, id, &out, &error), &error);
    json_t *json = LS_JSON(out, "get_annotation");
    layersync_free(out);
    return json;
}

static int flag(const json_t *record, const char *key)
{
    const json_t *value = json_object_get(record, key);
    CHECK_MSG(json_is_boolean(value), "record has no boolean \"%s\"", key);
    return json_is_true(value);
}

/* A refusal with `code` whose message names `word` (CHECK_RC clears the error, so not that). */
static void expect_refused(int code, int rc, layersync_error *error, const char *word, const char *what)
{
    CHECK_MSG(rc == code && error->code == code, "%s: returned %s (%d), expected %s", what,
              layersync_error_code_name(rc), rc, layersync_error_code_name(code));
    CHECK_MSG(error->message != NULL && strstr(error->message, word) != NULL, "%s: message %s lacks '%s'", what,
              error->message ? error->message : "(null)", word);
    layersync_error_clear(error);
}

static char *default_group(layersync_document *document)
{
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *group = (char *)"unset";
    CHECK_OK(layersync_document_default_group(document, &group, &error), &error);
    return group;
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-perm");
    layersync_error error = LAYERSYNC_ERROR_INIT;

    /* bob's note on the server. */
    ls_events bob_events;
    ls_events_init(&bob_events);
    layersync_client *bob_client = NULL;
    layersync_document *bob = ls_open_downloaded(&server, "doc-perm", NULL, "bob", &bob_events, &bob_client, NULL);
    CHECK_OK(layersync_document_create_annotation(bob, NOTE("bobs", "bob's"), NULL, &error), &error);
    ls_sync(bob, &bob_events);
    ls_client_destroy(bob_client, &bob_events);
    ls_events_free(&bob_events);

    /* alice downloads it and adds her own; without a claim she may do everything. */
    const char *storage = ls_temp_dir("alice");
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = ls_client_create(server.url, storage, &events);
    char *jwt = ls_server_mint_token(&server, "doc-perm", NULL, "alice", 0);
    layersync_document *document = ls_document(client, jwt);
    free(jwt);
    ls_download(document, &events);
    CHECK_OK(layersync_document_create_annotation(document, NOTE("alices", "alice's"), NULL, &error), &error);
    ls_sync(document, &events);
    /* Without a claim every record is handed out with its ownership, and without the
       permission flags (they exist only under collaboration permissions). */
    json_t *theirs = get(document, "bobs");
    CHECK_STREQ(json_string_value(json_object_get(theirs, "createdBy")), "bob");
    CHECK_STREQ(json_string_value(json_object_get(theirs, "updatedBy")), "bob");
    CHECK(json_is_null(json_object_get(theirs, "group")));  /* present, null: no group */
    CHECK(json_object_get(theirs, "isEditable") == NULL && json_object_get(theirs, "isDeletable") == NULL);
    CHECK(json_object_get(theirs, "canReply") == NULL && json_object_get(theirs, "isFillable") == NULL);
    CHECK(json_object_get(theirs, "canSetGroup") == NULL);
    json_decref(theirs);
    ls_client_destroy(client, &events);
    ls_events_free(&events);

    /* The same store opened with a reviewer's token: edit and delete only her own records. */
    ls_events_init(&events);
    client = ls_client_create(server.url, storage, &events);
    CHECK_OK(layersync_client_set_network_available(client, false, &error), &error);
    char *reviewer = ls_make_jwt("{\"document_id\":\"doc-perm\",\"user_id\":\"alice\",\"default_group\":\"team\","
                                 "\"collaboration_permissions\":[\"annotations:view:all\",\"annotations:edit:self\","
                                 "\"annotations:delete:self\"]}");
    document = ls_document(client, reviewer);
    free(reviewer);
    theirs = get(document, "bobs");
    CHECK_STREQ(json_string_value(json_object_get(theirs, "createdBy")), "bob");
    CHECK_STREQ(json_string_value(json_object_get(theirs, "updatedBy")), "bob");
    CHECK(json_is_null(json_object_get(theirs, "group")));
    CHECK(!flag(theirs, "isEditable") && !flag(theirs, "isDeletable") && !flag(theirs, "canSetGroup") && !flag(theirs, "canReply"));
    CHECK(!flag(theirs, "isFillable"));
    json_decref(theirs);
    json_t *mine = get(document, "alices");
    CHECK(flag(mine, "isEditable") && flag(mine, "isDeletable") && !flag(mine, "canSetGroup"));
    json_decref(mine);

    char *out = NULL;
    expect_refused(LAYERSYNC_ERROR_FORBIDDEN,
                   layersync_document_update_annotation(document, NOTE("bobs", "alice edits bob's"), &out, &error), &error,
                   "edit", "update of bob's note");
    expect_refused(LAYERSYNC_ERROR_FORBIDDEN, layersync_document_delete_annotation(document, "bobs", &error), &error,
                   "delete", "delete of bob's note");
    CHECK_RC(LAYERSYNC_ERROR_FORBIDDEN, layersync_document_create_comment(document, "bobs", "{\"text\":{\"format\":\"plain\",\"value\":\"hi\"}}", &out, &error), &error);
    CHECK_MSG(layersync_document_has_unsynced_changes(document) == 0, "a refused change was queued");
    theirs = get(document, "bobs");
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(theirs, "text"), "value")), "bob's");
    json_decref(theirs);
    CHECK_OK(layersync_document_update_annotation(document, NOTE("alices", "alice edits hers"), NULL, &error), &error);
    CHECK(layersync_document_has_unsynced_changes(document) == 1);

    /* The default group: the JWT's, an override kept in the store, reset. */
    char *group = default_group(document);
    CHECK_STREQ(group, "team");
    layersync_free(group);
    CHECK_OK(layersync_document_create_annotation(document, NOTE("in-team", "x"), &out, &error), &error);
    json_t *created = LS_JSON(out, "create_annotation");
    layersync_free(out);
    CHECK_STREQ(json_string_value(json_object_get(created, "group")), "team");
    CHECK_STREQ(json_string_value(json_object_get(created, "createdBy")), "alice");
    json_decref(created);
    CHECK_OK(layersync_document_set_default_group(document, "drafts", &error), &error);
    group = default_group(document);
    CHECK_STREQ(group, "drafts");
    layersync_free(group);
    /* No set-group for "drafts": creating there is refused. */
    expect_refused(LAYERSYNC_ERROR_FORBIDDEN, layersync_document_create_annotation(document, NOTE("in-drafts", "x"), &out, &error),
                   &error, "drafts", "create in a group without set-group");
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_set_default_group(document, "", &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_default_group(document, NULL, &error), &error);
    CHECK_OK(layersync_document_set_default_group(document, NULL, &error), &error);
    group = default_group(document);
    CHECK_STREQ(group, "team");
    layersync_free(group);

    /* A malformed entry makes the token invalid offline, naming it. */
    char *bad = ls_make_jwt("{\"document_id\":\"doc-perm\",\"user_id\":\"alice\","
                            "\"collaboration_permissions\":[\"annotations:view:all\",\"annotations:fill:all\"]}");
    layersync_document *none = NULL;
    expect_refused(LAYERSYNC_ERROR_INVALID_JWT, layersync_client_document_for_jwt(client, bad, &none, &error), &error,
                   "annotations:fill:all", "a malformed collaboration_permissions entry");
    free(bad);

    layersync_error_clear(&error);
    ls_client_destroy(client, &events);
    CHECK_CALLBACK_THREADS(&events);
    ls_events_free(&events);
    ls_server_stop(&server);
    return ls_pass("collaboration_permissions");
}
