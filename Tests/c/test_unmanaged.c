/* UNMANAGED_DOCUMENT and UNMANAGED_ANNOTATION through the C ABI against the real server:
 * - layersync_client_remove_local_storage_for_document for a document id the client neither
 *   stores nor handed out a handle for fails with UNMANAGED_DOCUMENT (and removes nothing);
 *   for a document it has a handle for, removing twice is fine;
 * - history, rollback and restore of a record created offline (never synced) fail at once
 *   with UNMANAGED_ANNOTATION, the callback is never called; after a sync the same calls work. */
#include "ls_test.h"

#include <stdlib.h>

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-unmanaged");
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = NULL;
    layersync_document *document = ls_open_downloaded(&server, "doc-unmanaged", NULL, "alice", &events, &client, NULL);
    layersync_error error = LAYERSYNC_ERROR_INIT;

    /* UNMANAGED_DOCUMENT: never stored, no handle. */
    int rc = layersync_client_remove_local_storage_for_document(client, "never-stored", &error);
    CHECK_MSG(rc == LAYERSYNC_ERROR_UNMANAGED_DOCUMENT && error.code == rc, "remove never-stored: rc %d", rc);
    CHECK_STREQ(error.document_id, "never-stored");
    layersync_error_clear(&error);
    CHECK(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_CLEAN);

    /* UNMANAGED_ANNOTATION: a record created offline, not synced yet. */
    CHECK_OK(layersync_document_create_annotation(document, "{\"id\":\"local-only\",\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0}",
                                                  NULL, &error), &error);
    ls_result c;
    ls_result_init(&c);
    rc = layersync_document_annotation_history(document, "local-only", ls_on_result, &c, &error);
    CHECK_MSG(rc == LAYERSYNC_ERROR_UNMANAGED_ANNOTATION && error.code == rc, "history of a local-only record: rc %d", rc);
    CHECK_STREQ(error.record_id, "local-only");
    layersync_error_clear(&error);
    CHECK_RC(LAYERSYNC_ERROR_UNMANAGED_ANNOTATION,
             layersync_document_rollback_annotation(document, "local-only", 1, ls_on_result, &c, &error), &error);
    layersync_error_clear(&error);
    CHECK_RC(LAYERSYNC_ERROR_UNMANAGED_ANNOTATION,
             layersync_document_restore_annotation(document, "local-only", ls_on_result, &c, &error), &error);
    layersync_error_clear(&error);

    int calls;
    LS_GET(&c, c.calls, calls);
    CHECK_MSG(calls == 0, "a refused call still called its callback");

    /* Once synced the server manages it: history answers through the callback. */
    ls_sync(document, &events);
    CHECK_OK(layersync_document_annotation_history(document, "local-only", ls_on_result, &c, &error), &error);
    LS_WAIT(&c, LS_TIMEOUT_MS, c.calls >= 1);
    CHECK_MSG(c.calls == 1 && c.code == 0, "history after sync: %d calls, code %d", c.calls, c.code);
    /* An id unknown locally still goes to the server (NO_SUCH_ANNOTATION there). */
    CHECK_OK(layersync_document_annotation_history(document, "nowhere", ls_on_result, &c, &error), &error);
    LS_WAIT(&c, LS_TIMEOUT_MS, c.calls >= 2);
    CHECK_MSG(c.code == LAYERSYNC_ERROR_NO_SUCH_ANNOTATION, "history of an unknown id: code %d", c.code);

    /* A document the client has a handle for is managed: removing twice is fine. */
    CHECK_OK(layersync_client_remove_local_storage_for_document(client, "doc-unmanaged", &error), &error);
    CHECK(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_INVALID);
    CHECK_OK(layersync_client_remove_local_storage_for_document(client, "doc-unmanaged", &error), &error);

    ls_client_destroy(client, &events);
    ls_events_free(&events);
    return ls_pass("unmanaged");
}
