/* layersync_client_options_init, layersync_client_create/destroy, the getters, and the
 * delegate's release_context: called exactly once, after the client is destroyed. No server
 * needed (a loopback port nobody listens on). */
#include "ls_test.h"

#include <sys/stat.h>

static void check_defaults(void)
{
    layersync_client_options options;
    memset(&options, 0x5A, sizeof options);
    CHECK_OK(layersync_client_options_init(&options, LAYERSYNC_CLIENT_OPTIONS_VERSION), NULL);
    CHECK(options.version == LAYERSYNC_CLIENT_OPTIONS_VERSION);
    CHECK(options.server_url == NULL);
    CHECK(options.storage_path == NULL);
    CHECK(options.allow_insecure_http == false);
    CHECK(options.sync_delay_s == 1.0);
    CHECK(options.connect_timeout_s == 10.0);
    CHECK(options.request_timeout_s == 30.0);
    CHECK(options.long_poll_wait_s == 30);

    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT,
             layersync_client_options_init(NULL, LAYERSYNC_CLIENT_OPTIONS_VERSION), NULL);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT,
             layersync_client_options_init(&options, LAYERSYNC_CLIENT_OPTIONS_VERSION + 1), NULL);
}

static void check_refused(const char *what, const layersync_client_options *options,
                          const layersync_client_delegate *delegate, int expected, ls_events *events)
{
    layersync_client *client = (layersync_client *)(uintptr_t)0x1;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    int rc = layersync_client_create(options, delegate, &client, &error);
    char buf[512];
    CHECK_MSG(rc == expected, "create with %s returned %s, expected %s", what, ls_describe(rc, &error, buf, sizeof buf),
              layersync_error_code_name(expected));
    CHECK_MSG(error.code == rc && error.message != NULL, "create with %s: error struct not filled", what);
    layersync_error_clear(&error);
    /* A refused create never takes ownership of the delegate's context. */
    if (events != NULL) {
        int released;
        LS_GET(events, events->release_context, released);
        CHECK_MSG(released == 0, "create with %s called release_context although it failed", what);
    }
}

int main(void)
{
    check_defaults();

    const char *url = ls_closed_port_url();
    const char *base = ls_temp_dir("lifecycle");
    char storage[1024];
    snprintf(storage, sizeof storage, "%s/nested/store", base);

    /* Arguments refused before anything starts. */
    ls_events refused;
    ls_events_init(&refused);
    layersync_client_delegate refused_delegate = ls_events_delegate(&refused);
    layersync_client_options options = ls_client_options(url, storage);
    layersync_client *client = NULL;
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_client_create(NULL, NULL, &client, NULL), NULL);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_client_create(&options, NULL, NULL, NULL), NULL);
    layersync_client_options bad = options;
    bad.server_url = NULL;
    check_refused("NULL server_url", &bad, &refused_delegate, LAYERSYNC_ERROR_INVALID_ARGUMENT, &refused);
    bad = options;
    bad.storage_path = NULL;
    check_refused("NULL storage_path", &bad, &refused_delegate, LAYERSYNC_ERROR_INVALID_ARGUMENT, &refused);
    bad = options;
    bad.server_url = "not a url";
    check_refused("'not a url'", &bad, &refused_delegate, LAYERSYNC_ERROR_INVALID_URL, &refused);
    bad = options;
    bad.server_url = "http://sync.example.com";
    check_refused("plain http:// to a non-loopback host", &bad, &refused_delegate, LAYERSYNC_ERROR_INVALID_URL,
                  &refused);
    ls_events_free(&refused);

    /* Create, with the options' strings copied and the storage directory created 0700. */
    ls_events events;
    ls_events_init(&events);
    char url_buffer[128], storage_buffer[1024];
    snprintf(url_buffer, sizeof url_buffer, "%s", url);
    snprintf(storage_buffer, sizeof storage_buffer, "%s", storage);
    options = ls_client_options(url_buffer, storage_buffer);
    layersync_client_delegate delegate = ls_events_delegate(&events);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_client_create(&options, &delegate, &client, &error), &error);
    CHECK(client != NULL);
    memset(url_buffer, 'x', sizeof url_buffer - 1);           /* strings were copied */
    memset(storage_buffer, 'y', sizeof storage_buffer - 1);
    memset(&delegate, 0, sizeof delegate);                    /* the delegate was copied */
    CHECK_STREQ(layersync_client_server_url(client), url);
    CHECK_STREQ(layersync_client_storage_path(client), storage);
    CHECK(layersync_client_server_url(NULL) == NULL);
    CHECK(layersync_client_storage_path(NULL) == NULL);
    struct stat st;
    CHECK_MSG(stat(storage, &st) == 0 && S_ISDIR(st.st_mode), "storage directory %s was not created", storage);
    CHECK_MSG((st.st_mode & 0777) == 0700, "storage directory mode %o, expected 0700", (unsigned)(st.st_mode & 0777));

    /* The copied delegate still works: the connection sequence reports (REQUEST_FAILED here). */
    LS_WAIT(&events, LS_TIMEOUT_MS, events.server_did_validate >= 1);
    int released;
    LS_GET(&events, events.release_context, released);
    CHECK(released == 0);
    ls_client_destroy(client, &events); /* release_context exactly once, by the time destroy returns */
    int validated;
    LS_GET(&events, events.server_did_validate, validated);
    CHECK_MSG(validated == 1, "server_did_validate reported %d times, expected once", validated);
    CHECK_CALLBACK_THREADS(&events);
    ls_events_free(&events);

    /* Repeated create/destroy: each client releases its own context once. */
    for (int i = 0; i < 5; i++) {
        ls_events each;
        ls_events_init(&each);
        layersync_client *c = ls_client_create(url, storage, &each);
        ls_client_destroy(c, &each);
        ls_events_free(&each);
    }

    /* Destroy right after create, while the connection sequence may still be running. */
    ls_events quick;
    ls_events_init(&quick);
    layersync_client *c = ls_client_create(url, storage, &quick);
    ls_client_destroy(c, &quick);
    ls_events_free(&quick);

    /* No delegate at all, and destroying NULL. */
    options = ls_client_options(url, storage);
    CHECK_OK(layersync_client_create(&options, NULL, &client, &error), &error);
    CHECK_OK(layersync_client_destroy(client, &error), &error);
    CHECK_OK(layersync_client_destroy(NULL, &error), &error);
    return ls_pass("client_lifecycle");
}
