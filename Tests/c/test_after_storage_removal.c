/* Use of a document handle after its local storage was removed (docs/threading.md §6), against
 * the real server. For layersync_document_remove_local_storage and for
 * layersync_client_remove_local_storage:
 * - the state is LAYERSYNC_DOCUMENT_STATE_INVALID, reported once to the delegate and to an
 *   observer registered before the removal;
 * - every document function returns what the header documents (a table: one row per
 *   function, all rows checked, mismatches listed together); no result callback runs for a
 *   refused call;
 * - the handle pointer stays valid (getters keep answering) until the client is destroyed;
 * - layersync_client_destroy afterwards is clean: the observer is released once, the
 *   delegate once, no callback after destroy returned. */
#include "ls_test.h"

#include <stdlib.h>
#include <unistd.h>

typedef struct probe {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int invalid_reported, state_changes, results, release_context;
} probe;

static void on_state(void *context, layersync_document *document, layersync_document_state_t state)
{
    (void)document;
    probe *p = context;
    pthread_mutex_lock(&p->mutex);
    p->state_changes++;
    if (state == LAYERSYNC_DOCUMENT_STATE_INVALID) p->invalid_reported++;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mutex);
}

static void on_release(void *context)
{
    probe *p = context;
    pthread_mutex_lock(&p->mutex);
    p->release_context++;
    pthread_mutex_unlock(&p->mutex);
}

static void on_result(void *context, layersync_document *document, const char *json, const layersync_error *error)
{
    (void)document;
    (void)json;
    (void)error;
    probe *p = context;
    pthread_mutex_lock(&p->mutex);
    p->results++;
    pthread_mutex_unlock(&p->mutex);
}

static void probe_init(probe *p)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mutex, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cond, &attr);
    pthread_condattr_destroy(&attr);
}

static void expect(const char *what, int expected, int rc, layersync_error *error)
{
    char buf[512];
    if (rc != expected) {
        ls_fail_later(__FILE__, __LINE__, "after storage removal %s returned %s, documented %s", what,
                      ls_describe(rc, error, buf, sizeof buf), layersync_error_code_name(expected));
    } else if (rc != LAYERSYNC_OK && error->code != rc) {
        ls_fail_later(__FILE__, __LINE__, "%s: error.code %d differs from rc %d", what, error->code, rc);
    } else {
        printf("  %-46s %s\n", what, layersync_error_code_name(rc));
    }
    layersync_error_clear(error);
}

/* Every document function on a removed handle. */
static void check_all(layersync_document *document, const char *jwt, const char *annotation_id, probe *p,
                      const char *label)
{
    printf("%s:\n", label);
    const int S = LAYERSYNC_ERROR_INVALID_STATE;
    layersync_error e = LAYERSYNC_ERROR_INIT;
    char *out = NULL;
    /* Getters: the handle stays valid. */
    CHECK_LATER(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_INVALID, "state %d",
                (int)layersync_document_state(document));
    CHECK_LATER(layersync_document_id(document) && strcmp(layersync_document_id(document), "doc-r") == 0, "document_id");
    CHECK_LATER(layersync_document_layer_name(document) != NULL, "layer_name");
    CHECK_LATER(!layersync_document_is_downloaded(document), "is_downloaded after removal");
    CHECK_LATER(!layersync_document_has_unsynced_changes(document), "has_unsynced_changes after removal");
    (void)layersync_document_sync_delay(document);
    expect("user_id", LAYERSYNC_OK, layersync_document_user_id(document, &out, &e), &e);
    if (out) CHECK_LATER(strcmp(out, "alice") == 0, "user_id %s", out);
    layersync_free(out);
    out = NULL;
    /* Stopping things that cannot run: no-ops. */
    expect("cancel_download", LAYERSYNC_OK, layersync_document_cancel_download(document, &e), &e);
    expect("stop_syncing", LAYERSYNC_OK, layersync_document_stop_syncing(document, true, &e), &e);
    expect("stop_listening", LAYERSYNC_OK, layersync_document_stop_listening(document, &e), &e);
    expect("remove_local_storage (again)", LAYERSYNC_OK, layersync_document_remove_local_storage(document, &e), &e);
    /* Everything else: INVALID_STATE. */
    expect("pdf_path", S, layersync_document_pdf_path(document, &out, &e), &e);
    layersync_free(out);
    out = NULL;
    expect("download", S, layersync_document_download(document, &e), &e);
    expect("sync", S, layersync_document_sync(document, &e), &e);
    expect("start_listening", S, layersync_document_start_listening(document, &e), &e);
    expect("set_sync_delay", S, layersync_document_set_sync_delay(document, 1.0, &e), &e);
    expect("reauthenticate", S, layersync_document_reauthenticate(document, jwt, &e), &e);
    expect("attempt_content_migration", S, layersync_document_attempt_content_migration(document, &e), &e);
    expect("create_annotation", S,
           layersync_document_create_annotation(document, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0}", &out, &e), &e);
    layersync_free(out);
    out = NULL;
    char update[256];
    snprintf(update, sizeof update, "{\"id\":\"%s\",\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":1}", annotation_id);
    expect("update_annotation", S, layersync_document_update_annotation(document, update, &out, &e), &e);
    layersync_free(out);
    out = NULL;
    expect("delete_annotation", S, layersync_document_delete_annotation(document, annotation_id, &e), &e);
    expect("get_annotation", S, layersync_document_get_annotation(document, annotation_id, &out, &e), &e);
    layersync_free(out);
    out = NULL;
    expect("list_annotations", S, layersync_document_list_annotations(document, NULL, &out, &e), &e);
    layersync_free(out);
    out = NULL;
    expect("create_comment", S,
           layersync_document_create_comment(document, annotation_id, "{\"text\":{\"format\":\"plain\",\"value\":\"x\"}}", &out, &e),
           &e);
    layersync_free(out);
    out = NULL;
    expect("list_comments", S, layersync_document_list_comments(document, annotation_id, &out, &e), &e);
    layersync_free(out);
    out = NULL;
    expect("search_annotations", S, layersync_document_search_annotations(document, "x", 10, &out, &e), &e);
    layersync_free(out);
    out = NULL;
    expect("annotation_history", S, layersync_document_annotation_history(document, annotation_id, on_result, p, &e), &e);
    expect("rollback_annotation", S, layersync_document_rollback_annotation(document, annotation_id, 1, on_result, p, &e), &e);
    expect("list_deleted_annotations", S, layersync_document_list_deleted_annotations(document, on_result, p, &e), &e);
    expect("restore_annotation", S, layersync_document_restore_annotation(document, annotation_id, on_result, p, &e), &e);
    char *attachment_id = NULL;
    expect("add_attachment", S, layersync_document_add_attachment(document, "abc", 3, "text/plain", &attachment_id, &e), &e);
    layersync_free(attachment_id);
    layersync_attachment attachment = LAYERSYNC_ATTACHMENT_INIT;
    expect("attachment_data", S,
           layersync_document_attachment_data(document,
                                              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                                              &attachment, &e),
           &e);
    expect("download_attachment", S,
           layersync_document_download_attachment(document,
                                                  "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                                                  on_result, p, &e),
           &e);
    /* Observing an INVALID document: documented INVALID_STATE. */
    layersync_document_observer table = LAYERSYNC_DOCUMENT_OBSERVER_INIT;
    layersync_observer *late = NULL;
    int rc = layersync_document_add_observer(document, &table, &late, &e);
    expect("add_observer", S, rc, &e);
    if (rc == LAYERSYNC_OK) CHECK_OK(layersync_observer_remove(late, &e), &e);
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-r");
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = NULL;
    char *jwt = NULL;
    layersync_document *doc = ls_open_downloaded(&server, "doc-r", NULL, "alice", &events, &client, &jwt);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    probe p1, p2;
    probe_init(&p1);
    probe_init(&p2);
    layersync_document_observer table = LAYERSYNC_DOCUMENT_OBSERVER_INIT;
    table.context = &p1;
    table.release_context = on_release;
    table.did_change_sync_state = on_state;
    layersync_observer *observer1 = NULL;
    CHECK_OK(layersync_document_add_observer(doc, &table, &observer1, &error), &error);

    /* Something to lose: one synced annotation, one unsynced. */
    char *out = NULL;
    CHECK_OK(layersync_document_create_annotation(doc, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0}", &out, &error), &error);
    json_t *created = LS_JSON(out, "create_annotation");
    layersync_free(out);
    char annotation_id[128];
    snprintf(annotation_id, sizeof annotation_id, "%s", json_string_value(json_object_get(created, "id")));
    json_decref(created);
    int finished;
    LS_GET(&events, events.did_finish_sync, finished);
    CHECK_OK(layersync_document_sync(doc, &error), &error);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_finish_sync > finished);
    CHECK_OK(layersync_document_create_annotation(doc, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":1}", &out, &error), &error);
    layersync_free(out);
    CHECK_OK(layersync_document_start_listening(doc, &error), &error); /* a long-poll in flight */

    /* A. layersync_document_remove_local_storage. */
    CHECK_OK(layersync_document_remove_local_storage(doc, &error), &error);
    LS_WAIT(&p1, LS_TIMEOUT_MS, p1.invalid_reported >= 1);
    check_all(doc, jwt, annotation_id, &p1, "after layersync_document_remove_local_storage");

    /* B. layersync_client_remove_local_storage, on a new handle for the same layer. */
    layersync_document *doc2 = ls_document(client, jwt);
    CHECK(doc2 != doc);
    ls_download(doc2, &events);
    table.context = &p2;
    layersync_observer *observer2 = NULL;
    CHECK_OK(layersync_document_add_observer(doc2, &table, &observer2, &error), &error);
    CHECK_OK(layersync_document_create_annotation(doc2, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":2}", &out, &error), &error);
    layersync_free(out);
    CHECK_OK(layersync_client_remove_local_storage(client, &error), &error);
    LS_WAIT(&p2, LS_TIMEOUT_MS, p2.invalid_reported >= 1);
    check_all(doc2, jwt, annotation_id, &p2, "after layersync_client_remove_local_storage");
    /* The first handle is still a valid pointer. */
    CHECK(layersync_document_state(doc) == LAYERSYNC_DOCUMENT_STATE_INVALID);
    CHECK_STREQ(layersync_document_id(doc), "doc-r");

    /* Clean destroy: every queued callback first, then releases once each, nothing after. */
    usleep(200000);
    ls_client_destroy(client, &events);
    int calls1, calls2;
    pthread_mutex_lock(&p1.mutex);
    CHECK_LATER(p1.invalid_reported == 1, "observer 1: INVALID reported %d times", p1.invalid_reported);
    CHECK_LATER(p1.release_context == 1, "observer 1 released %d times", p1.release_context);
    CHECK_LATER(p1.results == 0, "%d result callbacks ran for refused calls", p1.results);
    calls1 = p1.state_changes;
    pthread_mutex_unlock(&p1.mutex);
    pthread_mutex_lock(&p2.mutex);
    CHECK_LATER(p2.invalid_reported == 1, "observer 2: INVALID reported %d times", p2.invalid_reported);
    CHECK_LATER(p2.release_context == 1, "observer 2 released %d times", p2.release_context);
    CHECK_LATER(p2.results == 0, "%d result callbacks ran for refused calls", p2.results);
    calls2 = p2.state_changes;
    pthread_mutex_unlock(&p2.mutex);
    int invalid = 0;
    pthread_mutex_lock(&events.mutex);
    for (int i = 0; i < events.did_change_sync_state && i < LS_MAX_STATES; i++)
        if (events.states[i] == LAYERSYNC_DOCUMENT_STATE_INVALID) invalid++;
    pthread_mutex_unlock(&events.mutex);
    CHECK_LATER(invalid == 2, "the delegate saw INVALID %d times for 2 removed handles", invalid);
    usleep(200000);
    int later1, later2;
    LS_GET(&p1, p1.state_changes, later1);
    LS_GET(&p2, p2.state_changes, later2);
    CHECK_LATER(later1 == calls1 && later2 == calls2, "observer called after destroy returned");
    (void)observer2;
    CHECK_CALLBACK_THREADS(&events);
    ls_events_free(&events);
    free(jwt);
    return ls_pass("after_storage_removal");
}
