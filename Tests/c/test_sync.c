/* layersync_document_sync against the real server: did_begin_sync, did_change_sync_state
 * (through SENDING_CHANGES back to CLEAN), did_finish_sync; no pending changes afterwards; a
 * second client downloading the layer gets the record byte-exact; deletes sync too. */
#include "ls_test.h"

#include <stdlib.h>

/* "مزامنة 🔄 sync" */
static const char TEXT[] = "\xD9\x85\xD8\xB2\xD8\xA7\xD9\x85\xD9\x86\xD8\xA9 \xF0\x9F\x94\x84 sync";

static void sync_and_wait(layersync_document *document, ls_events *events)
{
    int begun, finished, failed;
    pthread_mutex_lock(&events->mutex);
    begun = events->did_begin_sync;
    finished = events->did_finish_sync;
    failed = events->did_fail_sync;
    pthread_mutex_unlock(&events->mutex);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_sync(document, &error), &error);
    LS_WAIT(events, LS_TIMEOUT_MS, events->did_finish_sync > finished || events->did_fail_sync > failed);
    int code, now_failed, now_begun;
    pthread_mutex_lock(&events->mutex);
    code = events->fail_sync_code;
    now_failed = events->did_fail_sync;
    now_begun = events->did_begin_sync;
    pthread_mutex_unlock(&events->mutex);
    CHECK_MSG(now_failed == failed, "did_fail_sync: %s (%d)", layersync_error_code_name(code), code);
    CHECK_MSG(now_begun > begun, "did_finish_sync without did_begin_sync");
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-sync");

    ls_events events;
    ls_events_init(&events);
    layersync_client *client = NULL;
    layersync_document *document = ls_open_downloaded(&server, "doc-sync", "review", "alice", &events, &client, NULL);
    layersync_error error = LAYERSYNC_ERROR_INIT;

    json_t *input = json_pack("{s:i, s:s, s:i, s:[f,f,f,f], s:s, s:s, s:{s:s, s:s}, s:s}", "v", 2, "type",
                              "pspdfkit/note", "pageIndex", 0, "bbox", 5.0, 6.0, 20.0, 20.0, "createdAt",
                              "2025-01-02T03:04:05Z", "updatedAt", "2025-01-02T03:04:05Z", "text", "format", "plain",
                              "value", TEXT, "icon", "comment");
    char *input_text = json_dumps(input, JSON_COMPACT);
    char *out = NULL;
    CHECK_OK(layersync_document_create_annotation(document, input_text, &out, &error), &error);
    json_t *created = LS_JSON(out, "create_annotation");
    layersync_free(out);
    char id[64];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(created, "id")));
    CHECK(layersync_document_has_unsynced_changes(document));

    int states_before;
    LS_GET(&events, events.did_change_sync_state, states_before);
    sync_and_wait(document, &events);
    CHECK_MSG(!layersync_document_has_unsynced_changes(document), "pending changes left after did_finish_sync");
    CHECK_MSG(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_CLEAN, "state %d after sync, expected CLEAN",
              (int)layersync_document_state(document));

    /* did_change_sync_state: went through SENDING_CHANGES and ended CLEAN. */
    pthread_mutex_lock(&events.mutex);
    int states_after = events.did_change_sync_state;
    bool sent = false;
    layersync_document_state_t last = LAYERSYNC_DOCUMENT_STATE_UNKNOWN;
    for (int i = states_before; i < states_after && i < LS_MAX_STATES; i++) {
        if (events.states[i] == LAYERSYNC_DOCUMENT_STATE_SENDING_CHANGES) sent = true;
        last = events.states[i];
    }
    layersync_document *reported = events.last_document;
    pthread_mutex_unlock(&events.mutex);
    CHECK_MSG(states_after > states_before, "did_change_sync_state not called during the sync");
    CHECK_MSG(sent, "did_change_sync_state never reported SENDING_CHANGES while sending a change");
    CHECK_MSG(last == LAYERSYNC_DOCUMENT_STATE_CLEAN, "last did_change_sync_state was %d, expected CLEAN", (int)last);
    CHECK(reported == document);
    CHECK_CALLBACK_THREADS(&events);

    /* Another client downloads the layer and has the record, byte-exact. */
    ls_events other_events;
    ls_events_init(&other_events);
    layersync_client *other = NULL;
    layersync_document *other_doc =
        ls_open_downloaded(&server, "doc-sync", "review", "bob", &other_events, &other, NULL);
    CHECK_OK(layersync_document_get_annotation(other_doc, id, &out, &error), &error);
    json_t *seen = LS_JSON(out, "get_annotation on the second client");
    layersync_free(out);
    CHECK_JSON_SUBSET(input, seen, "record synced to the second client");
    json_decref(seen);

    /* A sync with nothing pending still runs a full cycle. */
    sync_and_wait(document, &events);

    /* Delete, sync, and the second client's sync removes it there too. */
    CHECK_OK(layersync_document_delete_annotation(document, id, &error), &error);
    sync_and_wait(document, &events);
    CHECK(!layersync_document_has_unsynced_changes(document));
    sync_and_wait(other_doc, &other_events);
    CHECK_RC(LAYERSYNC_ERROR_NO_SUCH_ANNOTATION, layersync_document_get_annotation(other_doc, id, &out, &error),
             &error);
    CHECK_CALLBACK_THREADS(&other_events);

    ls_client_destroy(other, &other_events);
    ls_events_free(&other_events);
    ls_client_destroy(client, &events);
    ls_events_free(&events);
    json_decref(created);
    free(input_text);
    json_decref(input);
    ls_server_stop(&server);
    return ls_pass("sync");
}
