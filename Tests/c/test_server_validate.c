/* The connection sequence: server_did_validate fires once per client, with the server's
 * /sync/v1/info on success (real server on loopback) and REQUEST_FAILED against a closed port. */
#include "ls_test.h"

int main(void)
{
    ls_server server;
    ls_server_start(&server);

    /* Success against the real server. */
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = ls_client_create(server.url, ls_temp_dir("validate-ok"), &events);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.server_did_validate >= 1);
    pthread_mutex_lock(&events.mutex);
    int code = events.validate_error_code;
    bool inconsistent = events.validate_inconsistent;
    char *info_text = events.server_info_json ? strdup(events.server_info_json) : NULL;
    pthread_mutex_unlock(&events.mutex);
    CHECK_MSG(code == 0, "server_did_validate against %s reported %s (%d)", server.url,
              layersync_error_code_name(code), code);
    CHECK_MSG(!inconsistent, "server_did_validate must get exactly one of server_info_json and error");
    json_t *info = LS_JSON(info_text, "server_info_json");
    CHECK(json_is_string(json_object_get(info, "server_version")));
    json_t *protocol = json_object_get(info, "protocol");
    CHECK(json_is_integer(json_object_get(protocol, "min")));
    CHECK(json_is_integer(json_object_get(protocol, "max")));
    json_t *limits = json_object_get(info, "limits");
    CHECK(json_integer_value(json_object_get(limits, "max_request_bytes")) > 0);
    json_decref(info);
    free(info_text);
    ls_client_destroy(client, &events);
    int validated;
    LS_GET(&events, events.server_did_validate, validated);
    CHECK_MSG(validated == 1, "server_did_validate reported %d times, expected once", validated);
    CHECK_CALLBACK_THREADS(&events);
    ls_events_free(&events);

    /* REQUEST_FAILED against a port nobody listens on. */
    ls_events closed;
    ls_events_init(&closed);
    layersync_client *offline = ls_client_create(ls_closed_port_url(), ls_temp_dir("validate-closed"), &closed);
    LS_WAIT(&closed, LS_TIMEOUT_MS, closed.server_did_validate >= 1);
    LS_GET(&closed, closed.validate_error_code, code);
    CHECK_MSG(code == LAYERSYNC_ERROR_REQUEST_FAILED, "server_did_validate against a closed port reported %s (%d), "
              "expected REQUEST_FAILED", layersync_error_code_name(code), code);
    pthread_mutex_lock(&closed.mutex);
    bool got_info = closed.server_info_json != NULL;
    pthread_mutex_unlock(&closed.mutex);
    CHECK_MSG(!got_info, "server_did_validate failure must pass server_info_json = NULL");
    ls_client_destroy(offline, &closed);
    LS_GET(&closed, closed.server_did_validate, validated);
    CHECK_MSG(validated == 1, "server_did_validate reported %d times, expected once", validated);
    CHECK_CALLBACK_THREADS(&closed);
    ls_events_free(&closed);

    ls_server_stop(&server);
    return ls_pass("server_validate");
}
