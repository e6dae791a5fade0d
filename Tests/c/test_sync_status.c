/* The client delegate's did_reset_layer (the last field of layersync_client_delegate) and
 * layersync_document_last_sync_time, against the real server:
 * - last_sync_time is 0 before any sync, the wall-clock time of the last did_finish_sync
 *   afterwards, and survives destroying and re-creating the client (persisted);
 * - when the server's layer is deleted and recreated (new epoch), the next sync calls the
 *   delegate's did_reset_layer once with SERVER_RESET, and the unsynced edit is kept. */
#include "ls_test.h"

#include <stdlib.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-status");
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = NULL;
    char *jwt = NULL;
    layersync_document *document = ls_open_downloaded(&server, "doc-status", NULL, "alice", &events, &client, &jwt);
    layersync_error error = LAYERSYNC_ERROR_INIT;

    /* last_sync_time */
    CHECK(layersync_document_last_sync_time(NULL) == 0.0);
    CHECK_MSG(layersync_document_last_sync_time(document) == 0.0, "last_sync_time before any sync: %f",
              layersync_document_last_sync_time(document));
    double before = now_s();
    CHECK_OK(layersync_document_create_annotation(document, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0}", NULL, &error), &error);
    ls_sync(document, &events);
    double after = now_s();
    double synced = layersync_document_last_sync_time(document);
    CHECK_MSG(synced >= before - 1.0 && synced <= after + 1.0, "last_sync_time %f not within [%f, %f]", synced, before, after);
    char *storage = strdup(layersync_client_storage_path(client));
    ls_client_destroy(client, &events);
    ls_events_free(&events);

    /* Persisted: a new client on the same storage sees the same time. */
    ls_events_init(&events);
    client = ls_client_create(server.url, storage, &events);
    document = ls_document(client, jwt);
    CHECK_MSG(layersync_document_last_sync_time(document) == synced, "last_sync_time after restart %f, was %f",
              layersync_document_last_sync_time(document), synced);

    /* did_reset_layer through the client delegate: the layer is deleted and created again
     * on the server by the backend. */
    char url[512];
    snprintf(url, sizeof url, "%s/api/documents/doc-status/layers/~", server.url);
    char *argv[] = {"/usr/bin/python3", "-c",
                    "import sys, urllib.request as u; h={'Authorization': 'Token token=\"secret\"', "
                    "'Content-Type': 'application/json'}; "
                    "u.urlopen(u.Request(sys.argv[1], method='DELETE', headers=h)); "
                    "u.urlopen(u.Request(sys.argv[1].rsplit('/', 1)[0], data=b'{\"name\": \"\"}', method='POST', headers=h))",
                    url, NULL};
    CHECK_MSG(ls_run(argv, NULL) == 0, "admin DELETE and re-create of the layer failed");
    char *out = NULL;
    CHECK_OK(layersync_document_create_annotation(document, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":1}", &out, &error), &error);
    json_t *created = LS_JSON(out, "created");
    layersync_free(out);
    ls_sync(document, &events);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_reset_layer == 1);
    int code;
    LS_GET(&events, events.reset_layer_code, code);
    CHECK_MSG(code == LAYERSYNC_ERROR_SERVER_RESET, "did_reset_layer code %d", code);
    CHECK_OK(layersync_document_get_annotation(document, json_string_value(json_object_get(created, "id")), &out, &error), &error);
    layersync_free(out);
    json_decref(created);
    CHECK(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_CLEAN);
    CHECK(layersync_document_last_sync_time(document) >= synced);
    int resets;
    LS_GET(&events, events.did_reset_layer, resets);
    CHECK_MSG(resets == 1, "did_reset_layer called %d times", resets);

    ls_client_destroy(client, &events);
    ls_events_free(&events);
    free(storage);
    free(jwt);
    return ls_pass("sync_status");
}
