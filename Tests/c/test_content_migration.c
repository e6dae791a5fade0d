/* Content migration through the C ABI: a layer store whose records are in the older
 * content format (Instant JSON v1, as an older library wrote them) opens in state
 * NEEDS_CONTENT_MIGRATION; record calls and syncs fail with CONTENT_MIGRATION_NEEDED;
 * layersync_document_attempt_content_migration rewrites the records (state MIGRATING_CONTENT,
 * then DIRTY, each reported once) and the migrated record syncs to the server. */
#include "ls_test.h"

#include <glob.h>
#include <sqlite3.h>
#include <stdlib.h>

static void make_store_old(const char *storage)
{
    char pattern[1200];
    snprintf(pattern, sizeof pattern, "%s/*/doc-migrate/layers/~/layer.sqlite", storage);
    glob_t found;
    CHECK_MSG(glob(pattern, 0, NULL, &found) == 0 && found.gl_pathc == 1, "no layer store at %s", pattern);
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(found.gl_pathv[0], &db) == SQLITE_OK);
    globfree(&found);
    const char *v1 = "{\"id\":\"old-1\",\"v\":1,\"type\":\"pspdfkit/note\",\"pageIndex\":0,\"bbox\":[1,2,3,4],\"icon\":\"comment\",\"text\":\"written by v1\"}";
    char sql[1024];
    snprintf(sql, sizeof sql,
             "INSERT INTO records(id, content) VALUES ('old-1', '%s');"
             "INSERT INTO pending_changes(change_id, record_id, op, content) VALUES ('c-old', 'old-1', 'create', '%s');"
             "INSERT INTO meta(key, value) VALUES ('content_version', '1');",
             v1, v1);
    char *message = NULL;
    CHECK_MSG(sqlite3_exec(db, sql, NULL, NULL, &message) == SQLITE_OK, "sqlite: %s", message ? message : "?");
    sqlite3_close(db);
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-migrate");
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = NULL;
    char *jwt = NULL;
    layersync_document *document = ls_open_downloaded(&server, "doc-migrate", NULL, "alice", &events, &client, &jwt);
    char storage[1024];
    snprintf(storage, sizeof storage, "%s", layersync_client_storage_path(client));
    ls_client_destroy(client, &events); /* closes the store (and releases its lock) */
    ls_events_free(&events);
    make_store_old(storage);

    ls_events_init(&events);
    client = ls_client_create(server.url, storage, &events);
    document = ls_document(client, jwt);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;
    CHECK_MSG(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_NEEDS_CONTENT_MIGRATION, "state %d",
              (int)layersync_document_state(document));
    CHECK_RC(LAYERSYNC_ERROR_CONTENT_MIGRATION_NEEDED, layersync_document_list_annotations(document, NULL, &out, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_CONTENT_MIGRATION_NEEDED, layersync_document_sync(document, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_attempt_content_migration(NULL, &error), &error);

    int before;
    LS_GET(&events, events.did_change_sync_state, before);
    CHECK_OK(layersync_document_attempt_content_migration(document, &error), &error);
    CHECK(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_DIRTY);
    CHECK_OK(layersync_document_attempt_content_migration(document, &error), &error); /* nothing to do */
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_change_sync_state >= before + 2);
    pthread_mutex_lock(&events.mutex);
    CHECK(events.states[before] == LAYERSYNC_DOCUMENT_STATE_MIGRATING_CONTENT);
    CHECK(events.states[before + 1] == LAYERSYNC_DOCUMENT_STATE_DIRTY);
    pthread_mutex_unlock(&events.mutex);

    CHECK_OK(layersync_document_get_annotation(document, "old-1", &out, &error), &error);
    json_t *record = LS_JSON(out, "migrated record");
    layersync_free(out);
    CHECK(json_integer_value(json_object_get(record, "v")) == 2);
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(record, "text"), "value")), "written by v1");
    json_decref(record);

    int finished;
    LS_GET(&events, events.did_finish_sync, finished);
    CHECK_OK(layersync_document_sync(document, &error), &error);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_finish_sync > finished || events.did_fail_sync > 0);
    CHECK(!layersync_document_has_unsynced_changes(document));
    CHECK(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_CLEAN);

    ls_client_destroy(client, &events);
    ls_events_free(&events);
    free(jwt);
    return ls_pass("content_migration");
}
