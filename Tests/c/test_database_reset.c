/* Reset for a database migration through the C ABI: a layer store whose user_version is newer
 * than the library (written by a newer release) opens in state NEEDS_RESET_FOR_DATABASE_MIGRATION
 * (reported once), record calls and syncs fail with CONTENT_MIGRATION_NEEDED, and nothing is
 * written to it; layersync_document_attempt_content_migration returns at once and resets in the
 * background (RESETTING_FOR_DATABASE_MIGRATION, then DIRTY, each reported once): the old file is
 * kept as layer.sqlite.schema-N.bak, the snapshot is downloaded again and the unsynced local
 * edits salvaged from the old file are re-queued and reach the server after a sync. A first
 * attempt while offline ends in NEEDS_RESET again with did_fail_sync and keeps the salvaged
 * edits in layer.salvage.json; the retry (after reopening) re-queues them from there. */
#include "ls_test.h"

#include <glob.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

static void layer_path(const char *storage, const char *suffix, char *out, size_t size)
{
    char pattern[1200];
    snprintf(pattern, sizeof pattern, "%s/*/doc-reset/layers/~/%s", storage, suffix);
    glob_t found;
    CHECK_MSG(glob(pattern, 0, NULL, &found) == 0 && found.gl_pathc == 1, "no %s", pattern);
    snprintf(out, size, "%s", found.gl_pathv[0]);
    globfree(&found);
}

static void raise_user_version(const char *storage)
{
    char path[1200];
    layer_path(storage, "layer.sqlite", path, sizeof path);
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    char *message = NULL;
    CHECK_MSG(sqlite3_exec(db, "PRAGMA user_version = 99;", NULL, NULL, &message) == SQLITE_OK, "sqlite: %s",
              message ? message : "?");
    sqlite3_close(db);
}

static const char *text_of(layersync_document *document, const char *id, json_t **keep)
{
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;
    CHECK_OK(layersync_document_get_annotation(document, id, &out, &error), &error);
    *keep = LS_JSON(out, "record");
    layersync_free(out);
    return json_string_value(json_object_get(json_object_get(*keep, "text"), "value"));
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-reset");
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = NULL;
    char *jwt = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;
    layersync_document *document = ls_open_downloaded(&server, "doc-reset", NULL, "alice", &events, &client, &jwt);

    /* One record on the server, then two local edits that are not synced. */
    CHECK_OK(layersync_document_create_annotation(document, "{\"id\":\"r-synced\",\"type\":\"pspdfkit/note\",\"pageIndex\":0,\"bbox\":[1,2,3,4],\"icon\":\"comment\",\"text\":{\"format\":\"plain\",\"value\":\"one\"}}",
                                                  &out, &error), &error);
    layersync_free(out);
    int finished;
    LS_GET(&events, events.did_finish_sync, finished);
    CHECK_OK(layersync_document_sync(document, &error), &error);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_finish_sync > finished || events.did_fail_sync > 0);
    CHECK(!layersync_document_has_unsynced_changes(document));
    CHECK_OK(layersync_document_update_annotation(document, "{\"id\":\"r-synced\",\"type\":\"pspdfkit/note\",\"pageIndex\":0,\"bbox\":[1,2,3,4],\"icon\":\"comment\",\"text\":{\"format\":\"plain\",\"value\":\"two\"}}",
                                                  &out, &error), &error);
    layersync_free(out);
    CHECK_OK(layersync_document_create_annotation(document, "{\"id\":\"r-local\",\"type\":\"pspdfkit/note\",\"pageIndex\":0,\"bbox\":[1,2,3,4],\"icon\":\"comment\",\"text\":{\"format\":\"plain\",\"value\":\"offline\"}}",
                                                  &out, &error), &error);
    layersync_free(out);
    CHECK(layersync_document_has_unsynced_changes(document));

    char storage[1024];
    snprintf(storage, sizeof storage, "%s", layersync_client_storage_path(client));
    ls_client_destroy(client, &events);
    ls_events_free(&events);
    raise_user_version(storage);

    /* A reset that cannot reach the server ends in NEEDS_RESET again with did_fail_sync; the
     * salvaged edits stay on disk for the next attempt. */
    ls_events_init(&events);
    client = ls_client_create(server.url, storage, &events);
    document = ls_document(client, jwt);
    CHECK_OK(layersync_client_set_network_available(client, false, &error), &error);
    CHECK(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_NEEDS_RESET_FOR_DATABASE_MIGRATION);
    CHECK_OK(layersync_document_attempt_content_migration(document, &error), &error);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_fail_sync > 0 && events.did_change_sync_state >= 3);
    pthread_mutex_lock(&events.mutex);
    CHECK(events.states[0] == LAYERSYNC_DOCUMENT_STATE_NEEDS_RESET_FOR_DATABASE_MIGRATION);
    CHECK(events.states[1] == LAYERSYNC_DOCUMENT_STATE_RESETTING_FOR_DATABASE_MIGRATION);
    CHECK(events.states[2] == LAYERSYNC_DOCUMENT_STATE_NEEDS_RESET_FOR_DATABASE_MIGRATION);
    pthread_mutex_unlock(&events.mutex);
    CHECK(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_NEEDS_RESET_FOR_DATABASE_MIGRATION);
    CHECK_RC(LAYERSYNC_ERROR_CONTENT_MIGRATION_NEEDED, layersync_document_sync(document, &error), &error);
    char salvage[1200];
    layer_path(storage, "layer.salvage.json", salvage, sizeof salvage);
    ls_client_destroy(client, &events);
    ls_events_free(&events);

    /* Reopen: needs a reset, reported once; nothing usable, nothing written. */
    ls_events_init(&events);
    client = ls_client_create(server.url, storage, &events);
    document = ls_document(client, jwt);
    CHECK_MSG(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_NEEDS_RESET_FOR_DATABASE_MIGRATION, "state %d",
              (int)layersync_document_state(document));
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_change_sync_state >= 1);
    pthread_mutex_lock(&events.mutex);
    CHECK(events.states[0] == LAYERSYNC_DOCUMENT_STATE_NEEDS_RESET_FOR_DATABASE_MIGRATION);
    pthread_mutex_unlock(&events.mutex);
    CHECK_RC(LAYERSYNC_ERROR_CONTENT_MIGRATION_NEEDED, layersync_document_list_annotations(document, NULL, &out, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_CONTENT_MIGRATION_NEEDED, layersync_document_get_annotation(document, "r-local", &out, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_CONTENT_MIGRATION_NEEDED,
             layersync_document_create_annotation(document, "{\"type\":\"pspdfkit/note\",\"pageIndex\":0,\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\"}", &out, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_CONTENT_MIGRATION_NEEDED, layersync_document_sync(document, &error), &error);

    /* Reset: returns at once, RESETTING then DIRTY, each once. */
    CHECK_OK(layersync_document_attempt_content_migration(document, &error), &error);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_change_sync_state >= 3 || events.did_fail_sync > 0);
    pthread_mutex_lock(&events.mutex);
    CHECK_MSG(events.did_fail_sync == 0, "reset failed: %d", events.fail_sync_code);
    CHECK(events.did_reset_layer == 0);
    CHECK(events.states[1] == LAYERSYNC_DOCUMENT_STATE_RESETTING_FOR_DATABASE_MIGRATION);
    CHECK_MSG(events.states[2] == LAYERSYNC_DOCUMENT_STATE_DIRTY, "state %d", (int)events.states[2]);
    pthread_mutex_unlock(&events.mutex);
    CHECK(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_DIRTY);
    char backup[1200];
    layer_path(storage, "layer.sqlite.schema-99.bak", backup, sizeof backup);
    CHECK_MSG(access(salvage, F_OK) != 0, "%s left behind", salvage);

    /* The salvaged edits are back, on top of the re-downloaded snapshot. */
    json_t *record = NULL;
    CHECK_STREQ(text_of(document, "r-local", &record), "offline");
    json_decref(record);
    CHECK_STREQ(text_of(document, "r-synced", &record), "two");
    json_decref(record);
    LS_GET(&events, events.did_finish_sync, finished);
    CHECK_OK(layersync_document_sync(document, &error), &error);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_finish_sync > finished || events.did_fail_sync > 0);
    CHECK(events.did_fail_sync == 0);
    CHECK(!layersync_document_has_unsynced_changes(document));
    CHECK(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_CLEAN);
    pthread_mutex_lock(&events.mutex);
    int changes = events.did_change_sync_state;
    for (int i = 3; i < changes; ++i)
        CHECK(events.states[i] != LAYERSYNC_DOCUMENT_STATE_NEEDS_RESET_FOR_DATABASE_MIGRATION &&
              events.states[i] != LAYERSYNC_DOCUMENT_STATE_RESETTING_FOR_DATABASE_MIGRATION);
    pthread_mutex_unlock(&events.mutex);
    ls_client_destroy(client, &events);
    ls_events_free(&events);

    /* Another client sees both edits on the server. */
    ls_events_init(&events);
    layersync_client *other = NULL;
    layersync_document *fresh = ls_open_downloaded(&server, "doc-reset", NULL, "alice", &events, &other, NULL);
    CHECK_STREQ(text_of(fresh, "r-local", &record), "offline");
    json_decref(record);
    CHECK_STREQ(text_of(fresh, "r-synced", &record), "two");
    json_decref(record);
    ls_client_destroy(other, &events);
    ls_events_free(&events);

    free(jwt);
    ls_server_stop(&server);
    return ls_pass("database_reset");
}
