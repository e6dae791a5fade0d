/* Two clients of one layer: B listens (long-poll), A creates and syncs; B receives
 * did_receive_changes naming the new record and has it locally, byte-exact. Then A updates
 * and deletes, and B hears about those too. */
#include "ls_test.h"

#include <stdlib.h>

/* "مرحبا من أ 👋" */
static const char TEXT[] = "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xD9\x85\xD9\x86 \xD8\xA3 \xF0\x9F\x91\x8B";

static bool changes_name(const ls_events *ev, int from, const char *kind, const char *id)
{
    for (int i = from; i < ev->did_receive_changes && i < 64; i++) {
        const char *text = ev->received_changes[i];
        if (text == NULL) continue;
        json_t *json = json_loads(text, 0, NULL);
        json_t *ids = json_object_get(json, kind);
        size_t k;
        json_t *v;
        bool found = false;
        json_array_foreach(ids, k, v)
        {
            if (json_is_string(v) && strcmp(json_string_value(v), id) == 0) found = true;
        }
        json_decref(json);
        if (found) return true;
    }
    return false;
}

static void sync_and_wait(layersync_document *document, ls_events *events)
{
    int finished, failed;
    LS_GET(events, events->did_finish_sync, finished);
    LS_GET(events, events->did_fail_sync, failed);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_sync(document, &error), &error);
    LS_WAIT(events, LS_TIMEOUT_MS, events->did_finish_sync > finished || events->did_fail_sync > failed);
    int now_failed;
    LS_GET(events, events->did_fail_sync, now_failed);
    CHECK_MSG(now_failed == failed, "did_fail_sync");
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pypdf-commented.pdf"), "doc-live");

    ls_events a_events, b_events;
    ls_events_init(&a_events);
    ls_events_init(&b_events);
    layersync_client *a = NULL, *b = NULL;
    layersync_document *a_doc = ls_open_downloaded(&server, "doc-live", NULL, "alice", &a_events, &a, NULL);
    layersync_document *b_doc = ls_open_downloaded(&server, "doc-live", NULL, "bob", &b_events, &b, NULL);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_start_listening(b_doc, &error), &error);

    /* A creates and syncs; B hears it. */
    json_t *input = json_pack("{s:i, s:s, s:i, s:[f,f,f,f], s:s, s:s, s:{s:s, s:s}, s:s}", "v", 2, "type",
                              "pspdfkit/note", "pageIndex", 0, "bbox", 50.0, 60.0, 20.0, 20.0, "createdAt",
                              "2025-01-02T03:04:05Z", "updatedAt", "2025-01-02T03:04:05Z", "text", "format", "plain",
                              "value", TEXT, "icon", "comment");
    char *input_text = json_dumps(input, JSON_COMPACT);
    char *out = NULL;
    CHECK_OK(layersync_document_create_annotation(a_doc, input_text, &out, &error), &error);
    json_t *created = LS_JSON(out, "create_annotation");
    layersync_free(out);
    char id[64];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(created, "id")));
    sync_and_wait(a_doc, &a_events);

    LS_WAIT(&b_events, LS_TIMEOUT_MS, changes_name(&b_events, 0, "created", id));
    layersync_document *reported;
    LS_GET(&b_events, b_events.last_document, reported);
    CHECK(reported == b_doc);
    CHECK_OK(layersync_document_get_annotation(b_doc, id, &out, &error), &error);
    json_t *seen = LS_JSON(out, "B's copy");
    layersync_free(out);
    CHECK_JSON_SUBSET(input, seen, "record received by the listening client");
    json_decref(seen);
    CHECK_MSG(!layersync_document_has_unsynced_changes(b_doc), "received changes must not be pending on B");

    /* A updates; B hears "updated". */
    int mark;
    LS_GET(&b_events, b_events.did_receive_changes, mark);
    json_object_set_new(json_object_get(created, "text"), "value", json_string("edited \xF0\x9F\x96\x8A"));
    char *update_text = json_dumps(created, JSON_COMPACT);
    CHECK_OK(layersync_document_update_annotation(a_doc, update_text, NULL, &error), &error);
    sync_and_wait(a_doc, &a_events);
    LS_WAIT(&b_events, LS_TIMEOUT_MS, changes_name(&b_events, mark, "updated", id));
    CHECK_OK(layersync_document_get_annotation(b_doc, id, &out, &error), &error);
    seen = LS_JSON(out, "B's updated copy");
    layersync_free(out);
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(seen, "text"), "value")), "edited \xF0\x9F\x96\x8A");
    json_decref(seen);

    /* A deletes; B hears "deleted" and no longer has it. */
    LS_GET(&b_events, b_events.did_receive_changes, mark);
    CHECK_OK(layersync_document_delete_annotation(a_doc, id, &error), &error);
    sync_and_wait(a_doc, &a_events);
    LS_WAIT(&b_events, LS_TIMEOUT_MS, changes_name(&b_events, mark, "deleted", id));
    CHECK_RC(LAYERSYNC_ERROR_NO_SUCH_ANNOTATION, layersync_document_get_annotation(b_doc, id, &out, &error), &error);

    /* B heard all of it on the change stream (protocol version 2), not by long-poll. */
    CHECK(layersync_client_listening_transport(b) == LAYERSYNC_LISTENING_STREAM);
    CHECK(layersync_client_listening_transport(NULL) == LAYERSYNC_LISTENING_STREAM);
    CHECK(layersync_document_listening_transport(b_doc) == LAYERSYNC_LISTENING_STREAM);  /* its layer too */
    CHECK(layersync_document_listening_transport(NULL) == LAYERSYNC_LISTENING_STREAM);
    CHECK_OK(layersync_document_stop_listening(b_doc, &error), &error);
    CHECK_CALLBACK_THREADS(&a_events);
    CHECK_CALLBACK_THREADS(&b_events);
    /* Destroy while A is idle and B was listening: must not hang on the stream. */
    CHECK_OK(layersync_document_start_listening(b_doc, &error), &error);
    ls_client_destroy(b, &b_events);
    ls_client_destroy(a, &a_events);
    ls_events_free(&a_events);
    ls_events_free(&b_events);
    free(update_text);
    json_decref(created);
    free(input_text);
    json_decref(input);
    ls_server_stop(&server);
    return ls_pass("two_clients");
}
