/* layersync_client_destroy with work in flight (docs/threading.md §4): a download, a sync and
 * a long-poll are cancelled, destroy returns after release_context ran exactly once, no
 * callback runs after it returned, and the storage is released: a new client on the same
 * directory opens the same document at once and finds the local edit. */
#include "ls_test.h"

#include <stdlib.h>
#include <unistd.h>

static const char NOTE[] = "{\"v\":2,\"type\":\"pspdfkit/note\",\"icon\":\"comment\",\"pageIndex\":0,\"bbox\":[1,1,5,5],"
                           "\"createdAt\":\"2025-01-01T00:00:00Z\",\"updatedAt\":\"2025-01-01T00:00:00Z\","
                           "\"text\":{\"format\":\"plain\",\"value\":\"in flight\"}}";

/* No callback after destroy returned: the count stays put for a grace period. */
static void check_quiet_after_destroy(ls_events *events, const char *what)
{
    int before, after;
    LS_GET(events, events->callbacks, before);
    usleep(300 * 1000);
    LS_GET(events, events->callbacks, after);
    CHECK_LATER(after == before, "%s: %d callback(s) ran after layersync_client_destroy returned", what,
                after - before);
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pypdf-example.pdf"), "doc-flight");
    layersync_error error = LAYERSYNC_ERROR_INIT;

    /* 1. Destroy right after starting a download. */
    {
        ls_events events;
        ls_events_init(&events);
        layersync_client *client = ls_client_create(server.url, ls_temp_dir("client"), &events);
        char *jwt = ls_server_mint_token(&server, "doc-flight", NULL, "alice", 0);
        layersync_document *document = ls_document(client, jwt);
        CHECK_OK(layersync_document_download(document, &error), &error);
        ls_client_destroy(client, &events); /* release_context exactly once */
        check_quiet_after_destroy(&events, "download in flight");
        ls_events_free(&events);
        free(jwt);
    }

    /* 2. Destroy with a sync and a long-poll in flight, then reopen the same storage. */
    char *jwt = NULL;
    char storage[1024];
    char id[128];
    {
        ls_events events;
        ls_events_init(&events);
        layersync_client *client = NULL;
        layersync_document *document = ls_open_downloaded(&server, "doc-flight", NULL, "bob", &events, &client, &jwt);
        snprintf(storage, sizeof storage, "%s", layersync_client_storage_path(client));
        char *out = NULL;
        CHECK_OK(layersync_document_create_annotation(document, NOTE, &out, &error), &error);
        json_t *created = LS_JSON(out, "create_annotation");
        snprintf(id, sizeof id, "%s", json_string_value(json_object_get(created, "id")));
        json_decref(created);
        layersync_free(out);
        CHECK_OK(layersync_document_start_listening(document, &error), &error);
        CHECK_OK(layersync_document_sync(document, &error), &error);
        ls_client_destroy(client, &events);
        check_quiet_after_destroy(&events, "sync and long-poll in flight");
        ls_events_free(&events);
    }
    {
        ls_events events;
        ls_events_init(&events);
        layersync_client *client = ls_client_create(server.url, storage, &events);
        layersync_document *document = NULL;
        CHECK_OK(layersync_client_document_for_jwt(client, jwt, &document, &error), &error);
        CHECK_MSG(layersync_document_is_downloaded(document), "the reopened document is not downloaded");
        char *out = NULL;
        CHECK_OK(layersync_document_get_annotation(document, id, &out, &error), &error);
        layersync_free(out);
        ls_client_destroy(client, &events);
        ls_events_free(&events);
    }
    free(jwt);
    ls_server_stop(&server);
    return ls_pass("destroy_in_flight");
}
