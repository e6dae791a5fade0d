/* layersync_client_destroy from inside one of the client's callbacks is refused with
 * INVALID_STATE (it would wait for itself), not a deadlock; other API calls from a callback
 * work; destroying afterwards from the caller's thread succeeds and releases the context once. */
#include "ls_test.h"

#include <stdlib.h>

typedef struct {
    layersync_client *client;
    bool ran;
    int destroy_rc;
    int destroy_error_code;
    const char *server_url;
    int for_jwt_rc;
    layersync_document *document;
} reentry;

static void destroy_from_callback(ls_events *ev, const char *info, const layersync_error *err)
{
    (void)info;
    (void)err;
    reentry *r = ev->user;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    int rc = layersync_client_destroy(r->client, &error); /* must return, refused */
    int code = error.code;
    layersync_error_clear(&error);
    const char *url = layersync_client_server_url(r->client);
    char *jwt = ls_make_jwt("{\"document_id\":\"doc-in-callback\"}");
    layersync_document *document = NULL;
    int for_jwt = layersync_client_document_for_jwt(r->client, jwt, &document, &error);
    layersync_error_clear(&error);
    free(jwt);

    pthread_mutex_lock(&ev->mutex);
    r->destroy_rc = rc;
    r->destroy_error_code = code;
    r->server_url = url;
    r->for_jwt_rc = for_jwt;
    r->document = document;
    r->ran = true;
    pthread_cond_broadcast(&ev->cond);
    pthread_mutex_unlock(&ev->mutex);
}

int main(void)
{
    ls_events events;
    ls_events_init(&events);
    reentry r;
    memset(&r, 0, sizeof r);
    events.user = &r;
    events.on_validate = destroy_from_callback;
    /* The client pointer must be known to the callback before it can run: create it with the
     * callback blocked on the events mutex. */
    pthread_mutex_lock(&events.mutex);
    layersync_client_options options = ls_client_options(ls_closed_port_url(), ls_temp_dir("destroy"));
    layersync_client_delegate delegate = ls_events_delegate(&events);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    int rc = layersync_client_create(&options, &delegate, &r.client, &error);
    pthread_mutex_unlock(&events.mutex);
    CHECK_OK(rc, &error);

    /* A deadlock shows up here as a timeout (the test then exits without destroying). */
    LS_WAIT(&events, LS_TIMEOUT_MS, r.ran);
    CHECK_MSG(r.destroy_rc == LAYERSYNC_ERROR_INVALID_STATE,
              "layersync_client_destroy inside a callback returned %s (%d), expected INVALID_STATE",
              layersync_error_code_name(r.destroy_rc), r.destroy_rc);
    CHECK(r.destroy_error_code == LAYERSYNC_ERROR_INVALID_STATE);
    CHECK_MSG(r.server_url != NULL, "layersync_client_server_url inside a callback returned NULL");
    CHECK_MSG(r.for_jwt_rc == LAYERSYNC_OK && r.document != NULL,
              "layersync_client_document_for_jwt inside a callback returned %s",
              layersync_error_code_name(r.for_jwt_rc));
    int released;
    LS_GET(&events, events.release_context, released);
    CHECK_MSG(released == 0, "the refused destroy released the context");
    CHECK_STREQ(layersync_document_id(r.document), "doc-in-callback"); /* the client is alive */

    /* Now from the caller's thread: succeeds, release_context exactly once. */
    ls_client_destroy(r.client, &events);
    CHECK_CALLBACK_THREADS(&events);
    ls_events_free(&events);
    return ls_pass("destroy_in_callback");
}
