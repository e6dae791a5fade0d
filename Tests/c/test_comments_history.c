/* Comments, full-text search and the one-shot server operations (history, rollback, deleted
 * list, restore) through the C ABI against the real server. Each completion must arrive
 * exactly once, on the client's callback thread, with either a result or an error. */
#include "ls_test.h"

#include <stdlib.h>

/* The library hands `context` to its callback thread through Dispatch, which ThreadSanitizer
 * cannot see; this static mutex carries the happens-before edge from the init to the callback
 * (as ls_publish_mutex does in ls_test.c). */
static pthread_mutex_t publish_mutex = PTHREAD_MUTEX_INITIALIZER;

static void publish(void)
{
    pthread_mutex_lock(&publish_mutex);
    pthread_mutex_unlock(&publish_mutex);
}

typedef struct {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int calls;
    char *json;
    int code;
    bool on_caller_thread;
    layersync_document *document;
    pthread_t caller;
} completion;

static void completion_init(completion *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mutex, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &attr);
    pthread_condattr_destroy(&attr);
    c->caller = pthread_self();
    publish();
}

static void on_result(void *context, layersync_document *document, const char *json, const layersync_error *error)
{
    completion *c = context;
    publish();
    pthread_mutex_lock(&c->mutex);
    c->calls++;
    c->document = document;
    c->on_caller_thread = pthread_equal(pthread_self(), c->caller);
    free(c->json);
    c->json = json ? strdup(json) : NULL;
    c->code = error ? error->code : 0;
    if ((json == NULL) == (error == NULL)) c->code = -1; /* exactly one of them */
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mutex);
}

/* Waits for the completion; returns its JSON (owned by c) or NULL with c->code set. */
static const char *wait_result(completion *c, layersync_document *document)
{
    LS_WAIT(c, LS_TIMEOUT_MS, c->calls >= 1);
    CHECK_MSG(c->calls == 1, "completion called %d times", c->calls);
    CHECK(!c->on_caller_thread && c->document == document);
    CHECK_MSG(c->code != -1, "completion got both or neither of result and error");
    return c->json;
}

static json_t *parsed(char *text)
{
    json_t *json = LS_JSON(text, "result");
    layersync_free(text);
    return json;
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-history");
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = NULL;
    layersync_document *document = ls_open_downloaded(&server, "doc-history", NULL, "alice", &events, &client, NULL);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;

    /* Comments. */
    CHECK_OK(layersync_document_create_annotation(document, "{\"id\":\"root-1\",\"type\":\"pspdfkit/note\",\"note\":\"Zürich café\"}",
                                                  NULL, &error), &error);
    CHECK_OK(layersync_document_create_comment(document, "root-1", "{\"text\":{\"format\":\"plain\",\"value\":\"first reply\"}}",
                                               &out, &error), &error);
    json_t *comment = parsed(out);
    CHECK_STREQ(json_string_value(json_object_get(comment, "type")), "pspdfkit/comment");
    CHECK_STREQ(json_string_value(json_object_get(comment, "rootId")), "root-1");
    CHECK_RC(LAYERSYNC_ERROR_NO_SUCH_ANNOTATION, layersync_document_create_comment(document, "nope", "{}", &out, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_JSON_STRUCTURE,
             layersync_document_create_comment(document, "root-1", "{\"type\":\"pspdfkit/ink\"}", &out, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_create_comment(document, NULL, "{}", &out, &error), &error);
    CHECK_OK(layersync_document_list_comments(document, "root-1", &out, &error), &error);
    json_t *comments = parsed(out);
    CHECK(json_array_size(comments) == 1);
    CHECK(json_equal(json_array_get(comments, 0), comment));
    json_decref(comments);

    /* Search. */
    CHECK_OK(layersync_document_search_annotations(document, "zurich CAFE", 0, &out, &error), &error);
    json_t *found = parsed(out);
    CHECK_MSG(json_array_size(found) == 1, "search found %zu", json_array_size(found));
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(found, 0), "id")), "root-1");
    json_decref(found);
    CHECK_OK(layersync_document_search_annotations(document, "reply", 5, &out, &error), &error);
    found = parsed(out);
    CHECK(json_array_size(found) == 1);
    json_decref(found);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_search_annotations(document, "  ", 0, &out, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_search_annotations(document, "x", -1, &out, &error), &error);
    ls_sync(document, &events);

    /* History and rollback. */
    CHECK_OK(layersync_document_update_annotation(document, "{\"id\":\"root-1\",\"type\":\"pspdfkit/note\",\"note\":\"second\"}",
                                                  NULL, &error), &error);
    ls_sync(document, &events);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_annotation_history(document, "root-1", NULL, NULL, &error), &error);
    completion history;
    completion_init(&history);
    CHECK_OK(layersync_document_annotation_history(document, "root-1", on_result, &history, &error), &error);
    json_t *versions = LS_JSON(wait_result(&history, document), "history");
    CHECK_MSG(json_array_size(versions) == 2, "history has %zu versions", json_array_size(versions));
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(json_array_get(versions, 0), "content"), "note")), "second");
    json_int_t first_revision = json_integer_value(json_object_get(json_array_get(versions, 1), "revision"));
    json_decref(versions);

    completion rollback;
    completion_init(&rollback);
    CHECK_OK(layersync_document_rollback_annotation(document, "root-1", first_revision, on_result, &rollback, &error), &error);
    json_t *rolled = LS_JSON(wait_result(&rollback, document), "rollback");
    CHECK_STREQ(json_string_value(json_object_get(rolled, "note")), "Zürich café");
    json_decref(rolled);
    CHECK_OK(layersync_document_get_annotation(document, "root-1", &out, &error), &error);
    rolled = parsed(out);
    CHECK_STREQ(json_string_value(json_object_get(rolled, "note")), "Zürich café");
    json_decref(rolled);

    /* Deleting the root deletes its comment; both are in the deleted list; restore. */
    CHECK_OK(layersync_document_delete_annotation(document, "root-1", &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_NO_SUCH_ANNOTATION, layersync_document_list_comments(document, "root-1", &out, &error), &error);
    ls_sync(document, &events);
    completion deleted;
    completion_init(&deleted);
    CHECK_OK(layersync_document_list_deleted_annotations(document, on_result, &deleted, &error), &error);
    json_t *tombstones = LS_JSON(wait_result(&deleted, document), "deleted");
    CHECK_MSG(json_array_size(tombstones) >= 2, "deleted list has %zu entries", json_array_size(tombstones));
    json_decref(tombstones);
    completion restore;
    completion_init(&restore);
    CHECK_OK(layersync_document_restore_annotation(document, "root-1", on_result, &restore, &error), &error);
    CHECK(wait_result(&restore, document) != NULL);
    CHECK_OK(layersync_document_get_annotation(document, "root-1", &out, &error), &error);
    layersync_free(out);
    completion again;
    completion_init(&again);
    CHECK_OK(layersync_document_restore_annotation(document, "root-1", on_result, &again, &error), &error);
    CHECK(wait_result(&again, document) == NULL);
    CHECK_MSG(again.code == LAYERSYNC_ERROR_CONFLICT, "restore of a live record: %d", again.code);
    completion missing;
    completion_init(&missing);
    CHECK_OK(layersync_document_annotation_history(document, "never-existed", on_result, &missing, &error), &error);
    CHECK(wait_result(&missing, document) == NULL);
    CHECK_MSG(missing.code == LAYERSYNC_ERROR_NO_SUCH_ANNOTATION, "history of nothing: %d", missing.code);

    json_decref(comment);
    completion *all[] = {&history, &rollback, &deleted, &restore, &again, &missing};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->json);
    ls_client_destroy(client, &events);
    CHECK_CALLBACK_THREADS(&events);
    ls_events_free(&events);
    return ls_pass("comments_history");
}
