/* Comments, full-text search and the one-shot server operations (history, rollback, deleted
 * list, restore) through the C ABI against the real server. Each ls_result must arrive
 * exactly once, on the client's callback thread, with either a result or an error. */
#include "ls_test.h"

#include <stdlib.h>

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
    CHECK_OK(layersync_document_create_annotation(document, "{\"id\":\"root-1\",\"type\":\"pspdfkit/note\",\"pageIndex\":0,\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"note\":\"Zürich café\"}",
                                                  NULL, &error), &error);
    CHECK_OK(layersync_document_create_comment(document, "root-1", "{\"pageIndex\":0,\"text\":{\"format\":\"plain\",\"value\":\"first reply\"}}",
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
    CHECK_OK(layersync_document_update_annotation(document, "{\"id\":\"root-1\",\"type\":\"pspdfkit/note\",\"pageIndex\":0,\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"note\":\"second\"}",
                                                  NULL, &error), &error);
    ls_sync(document, &events);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_annotation_history(document, "root-1", NULL, NULL, &error), &error);
    ls_result history;
    ls_result_init(&history);
    CHECK_OK(layersync_document_annotation_history(document, "root-1", ls_on_result, &history, &error), &error);
    json_t *versions = LS_JSON(ls_result_wait(&history, document), "history");
    CHECK_MSG(json_array_size(versions) == 2, "history has %zu versions", json_array_size(versions));
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(json_array_get(versions, 0), "content"), "note")), "second");
    json_int_t first_revision = json_integer_value(json_object_get(json_array_get(versions, 1), "revision"));
    json_decref(versions);

    ls_result rollback;
    ls_result_init(&rollback);
    CHECK_OK(layersync_document_rollback_annotation(document, "root-1", first_revision, ls_on_result, &rollback, &error), &error);
    json_t *rolled = LS_JSON(ls_result_wait(&rollback, document), "rollback");
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
    ls_result deleted;
    ls_result_init(&deleted);
    CHECK_OK(layersync_document_list_deleted_annotations(document, ls_on_result, &deleted, &error), &error);
    json_t *tombstones = LS_JSON(ls_result_wait(&deleted, document), "deleted");
    CHECK_MSG(json_array_size(tombstones) >= 2, "deleted list has %zu entries", json_array_size(tombstones));
    json_decref(tombstones);
    ls_result restore;
    ls_result_init(&restore);
    CHECK_OK(layersync_document_restore_annotation(document, "root-1", ls_on_result, &restore, &error), &error);
    CHECK(ls_result_wait(&restore, document) != NULL);
    CHECK_OK(layersync_document_get_annotation(document, "root-1", &out, &error), &error);
    layersync_free(out);
    ls_result again;
    ls_result_init(&again);
    CHECK_OK(layersync_document_restore_annotation(document, "root-1", ls_on_result, &again, &error), &error);
    CHECK(ls_result_wait(&again, document) == NULL);
    CHECK_MSG(again.code == LAYERSYNC_ERROR_CONFLICT, "restore of a live record: %d", again.code);
    ls_result missing;
    ls_result_init(&missing);
    CHECK_OK(layersync_document_annotation_history(document, "never-existed", ls_on_result, &missing, &error), &error);
    CHECK(ls_result_wait(&missing, document) == NULL);
    CHECK_MSG(missing.code == LAYERSYNC_ERROR_NO_SUCH_ANNOTATION, "history of nothing: %d", missing.code);

    json_decref(comment);
    ls_result *all[] = {&history, &rollback, &deleted, &restore, &again, &missing};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->json);
    ls_client_destroy(client, &events);
    CHECK_CALLBACK_THREADS(&events);
    ls_events_free(&events);
    return ls_pass("comments_history");
}
