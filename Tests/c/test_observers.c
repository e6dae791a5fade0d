/* Document observers (layersync_document_add_observer / layersync_observer_remove) against the
 * real server:
 * - every observer sees the same per-document events as the client delegate, in the same
 *   order, each state transition once;
 * - removal from another thread waits until the observer's running callback has returned,
 *   then calls release_context once;
 * - removal from inside the observer's own callback does not wait (no deadlock) and
 *   release_context runs after that callback returned; no callback follows;
 * - did_reset_layer reports SERVER_RESET when the server's layer is recreated;
 * - layersync_client_destroy releases observers still registered, once each. */
#include "ls_test.h"

#include <stdlib.h>
#include <unistd.h>

/* The library hands `context` to its callback thread through Dispatch, which ThreadSanitizer
 * cannot see; this static mutex carries the happens-before edge from the init to the callback
 * (as ls_publish_mutex does in ls_test.c). */
static pthread_mutex_t publish_mutex = PTHREAD_MUTEX_INITIALIZER;

static void publish(void)
{
    pthread_mutex_lock(&publish_mutex);
    pthread_mutex_unlock(&publish_mutex);
}

typedef struct recorder {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int events;                 /* callbacks of any kind */
    int begin_sync, finish_sync, fail_sync, state_changes, receive_changes, reject_changes;
    int finish_download, fail_download, progress, auth_failed, reauth_done, reauth_failed, token_requests;
    int reset_layer, reset_code;
    layersync_document_state_t states[LS_MAX_STATES];
    int release_context;
    bool callback_running;
    bool released_while_running;
    /* Blocking observer: its did_finish_sync waits for `allow_return`. */
    bool block_in_finish_sync, in_finish_sync, allow_return, returned;
    /* Self-removing observer. */
    layersync_observer *self_registration;
    bool remove_self_in_finish_sync;
    int remove_self_rc;
} recorder;

static void recorder_init(recorder *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mutex, NULL);
    pthread_condattr_t attr; /* LS_WAIT's deadlines are CLOCK_MONOTONIC */
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cond, &attr);
    pthread_condattr_destroy(&attr);
    publish();
}

static recorder *begin(void *context)
{
    publish();
    recorder *r = context;
    pthread_mutex_lock(&r->mutex);
    r->callback_running = true;
    r->events++;
    return r;
}

static void end(recorder *r)
{
    r->callback_running = false;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->mutex);
}

static void on_release(void *context)
{
    publish();
    recorder *r = context;
    pthread_mutex_lock(&r->mutex);
    if (r->callback_running || r->in_finish_sync) r->released_while_running = true;
    r->release_context++;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->mutex);
}

static void on_finish_download(void *c, layersync_document *d) { (void)d; recorder *r = begin(c); r->finish_download++; end(r); }
static void on_fail_download(void *c, layersync_document *d, const layersync_error *e) { (void)d; (void)e; recorder *r = begin(c); r->fail_download++; end(r); }
static void on_fail_authentication(void *c, layersync_document *d, const layersync_error *e) { (void)d; (void)e; recorder *r = begin(c); r->auth_failed++; end(r); }
static void on_finish_reauthentication(void *c, layersync_document *d, const char *v) { (void)d; (void)v; recorder *r = begin(c); r->reauth_done++; end(r); }
static void on_fail_reauthentication(void *c, layersync_document *d, const layersync_error *e) { (void)d; (void)e; recorder *r = begin(c); r->reauth_failed++; end(r); }
static void on_begin_sync(void *c, layersync_document *d) { (void)d; recorder *r = begin(c); r->begin_sync++; end(r); }
static void on_fail_sync(void *c, layersync_document *d, const layersync_error *e) { (void)d; (void)e; recorder *r = begin(c); r->fail_sync++; end(r); }
static void on_progress(void *c, layersync_document *d, int64_t done, int64_t total) { (void)d; (void)done; (void)total; recorder *r = begin(c); r->progress++; end(r); }
static void on_receive_changes(void *c, layersync_document *d, const char *v) { (void)d; (void)v; recorder *r = begin(c); r->receive_changes++; end(r); }
static void on_reject_changes(void *c, layersync_document *d, const char *v) { (void)d; (void)v; recorder *r = begin(c); r->reject_changes++; end(r); }
static void on_request_token(void *c, layersync_document *d) { (void)d; recorder *r = begin(c); r->token_requests++; end(r); }

static void on_change_sync_state(void *c, layersync_document *d, layersync_document_state_t state)
{
    (void)d;
    recorder *r = begin(c);
    if (r->state_changes < LS_MAX_STATES) r->states[r->state_changes] = state;
    r->state_changes++;
    end(r);
}

static void on_reset_layer(void *c, layersync_document *d, const layersync_error *e)
{
    (void)d;
    recorder *r = begin(c);
    r->reset_layer++;
    r->reset_code = e ? e->code : -1;
    end(r);
}

static void on_finish_sync(void *c, layersync_document *d)
{
    (void)d;
    recorder *r = begin(c);
    r->finish_sync++;
    if (r->block_in_finish_sync) {
        r->in_finish_sync = true;
        pthread_cond_broadcast(&r->cond);
        struct timespec deadline;
        ls_deadline(&deadline, 10000);
        while (!r->allow_return)
            if (pthread_cond_timedwait(&r->cond, &r->mutex, &deadline) == ETIMEDOUT) break;
        r->in_finish_sync = false;
        r->returned = true;
    }
    if (r->remove_self_in_finish_sync && r->self_registration) {
        layersync_observer *self = r->self_registration;
        r->self_registration = NULL;
        pthread_mutex_unlock(&r->mutex); /* release_context takes the mutex */
        r->remove_self_rc = layersync_observer_remove(self, NULL);
        pthread_mutex_lock(&r->mutex);
    }
    end(r);
}

static layersync_document_observer observer_table(recorder *r)
{
    layersync_document_observer table = LAYERSYNC_DOCUMENT_OBSERVER_INIT;
    table.context = r;
    table.release_context = on_release;
    table.did_finish_download = on_finish_download;
    table.did_fail_download = on_fail_download;
    table.did_fail_authentication = on_fail_authentication;
    table.did_finish_reauthentication = on_finish_reauthentication;
    table.did_fail_reauthentication = on_fail_reauthentication;
    table.did_begin_sync = on_begin_sync;
    table.did_change_sync_state = on_change_sync_state;
    table.did_fail_sync = on_fail_sync;
    table.did_finish_sync = on_finish_sync;
    table.download_progress = on_progress;
    table.did_receive_changes = on_receive_changes;
    table.did_reject_changes = on_reject_changes;
    table.request_token = on_request_token;
    table.did_reset_layer = on_reset_layer;
    return table;
}

#define R_WAIT(r, timeout_ms, condition) LS_WAIT((r), (timeout_ms), condition)

static void sync_once(layersync_document *document, ls_events *events)
{
    int finished, failed;
    LS_GET(events, events->did_finish_sync, finished);
    LS_GET(events, events->did_fail_sync, failed);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_sync(document, &error), &error);
    LS_WAIT(events, LS_TIMEOUT_MS, events->did_finish_sync > finished || events->did_fail_sync > failed);
}

typedef struct {
    layersync_observer *observer;
    recorder *watched;
    bool callback_had_returned;
    int rc;
} remover_args;

static void *remover(void *argument)
{
    remover_args *args = argument;
    args->rc = layersync_observer_remove(args->observer, NULL);
    pthread_mutex_lock(&args->watched->mutex);
    args->callback_had_returned = args->watched->returned;
    pthread_mutex_unlock(&args->watched->mutex);
    return NULL;
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-observers");
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = NULL;
    layersync_document *document = ls_open_downloaded(&server, "doc-observers", NULL, "alice", &events, &client, NULL);
    layersync_error error = LAYERSYNC_ERROR_INIT;

    /* Invalid arguments. */
    recorder a, b, c;
    recorder_init(&a);
    recorder_init(&b);
    recorder_init(&c);
    layersync_document_observer table_a = observer_table(&a), table_b = observer_table(&b), table_c = observer_table(&c);
    layersync_observer *obs_a = NULL, *obs_b = NULL, *obs_c = NULL;
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_add_observer(NULL, &table_a, &obs_a, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_add_observer(document, NULL, &obs_a, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_add_observer(document, &table_a, NULL, &error), &error);
    layersync_document_observer bad = table_a;
    bad.version = 99;
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_add_observer(document, &bad, &obs_a, &error), &error);
    CHECK_OK(layersync_observer_remove(NULL, &error), &error);

    CHECK_OK(layersync_document_add_observer(document, &table_a, &obs_a, &error), &error);
    CHECK_OK(layersync_document_add_observer(document, &table_b, &obs_b, &error), &error);
    CHECK_OK(layersync_document_add_observer(document, &table_c, &obs_c, &error), &error);
    pthread_mutex_lock(&c.mutex);
    c.self_registration = obs_c;
    c.remove_self_in_finish_sync = true;
    pthread_mutex_unlock(&c.mutex);

    /* 1. Same events as the delegate, every state transition once. */
    int delegate_states_before;
    LS_GET(&events, events.did_change_sync_state, delegate_states_before);
    char *out = NULL;
    CHECK_OK(layersync_document_create_annotation(document, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0}", &out, &error), &error);
    layersync_free(out);
    sync_once(document, &events);
    R_WAIT(&a, LS_TIMEOUT_MS, a.finish_sync == 1);
    R_WAIT(&b, LS_TIMEOUT_MS, b.finish_sync == 1);
    /* c removed itself inside did_finish_sync: no wait, release_context after it returned. */
    R_WAIT(&c, LS_TIMEOUT_MS, c.release_context == 1);
    int self_rc;
    bool released_early;
    LS_GET(&c, c.remove_self_rc, self_rc);
    LS_GET(&c, c.released_while_running, released_early);
    CHECK(self_rc == LAYERSYNC_OK);
    CHECK_MSG(!released_early, "release_context ran while the removing callback was still running");
    int delegate_states;
    LS_GET(&events, events.did_change_sync_state, delegate_states);
    int transitions = delegate_states - delegate_states_before;
    CHECK_MSG(transitions >= 3, "expected DIRTY, SENDING, RECEIVING/CLEAN transitions, got %d", transitions);
    pthread_mutex_lock(&events.mutex);
    pthread_mutex_lock(&a.mutex);
    CHECK_MSG(a.state_changes == transitions, "observer saw %d state changes, delegate %d", a.state_changes, transitions);
    for (int i = 0; i < transitions && i < LS_MAX_STATES; i++) {
        CHECK_MSG(a.states[i] == events.states[delegate_states_before + i], "transition %d differs", i);
        if (i > 0) CHECK_MSG(a.states[i] != a.states[i - 1], "state %d reported twice in a row", a.states[i]);
    }
    CHECK(a.begin_sync == 1 && a.fail_sync == 0);
    pthread_mutex_unlock(&a.mutex);
    pthread_mutex_unlock(&events.mutex);

    /* 2. Removal from another thread waits for b's running callback. */
    pthread_mutex_lock(&b.mutex);
    b.block_in_finish_sync = true;
    pthread_mutex_unlock(&b.mutex);
    CHECK_OK(layersync_document_create_annotation(document, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":1}", &out, &error), &error);
    layersync_free(out);
    CHECK_OK(layersync_document_sync(document, &error), &error);
    R_WAIT(&b, LS_TIMEOUT_MS, b.in_finish_sync);
    remover_args args = {.observer = obs_b, .watched = &b};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, remover, &args) == 0);
    usleep(150000); /* the window in which a remove that does not wait would return */
    pthread_mutex_lock(&b.mutex);
    b.allow_return = true;
    pthread_cond_broadcast(&b.cond);
    pthread_mutex_unlock(&b.mutex);
    pthread_join(thread, NULL);
    CHECK(args.rc == LAYERSYNC_OK);
    CHECK_MSG(args.callback_had_returned, "layersync_observer_remove returned while the observer's callback was running");
    R_WAIT(&b, LS_TIMEOUT_MS, b.release_context == 1 && !b.released_while_running);
    int b_events;
    LS_GET(&b, b.events, b_events);
    R_WAIT(&a, LS_TIMEOUT_MS, a.finish_sync == 2);

    /* 3. A server reset: the layer is deleted and created again by the backend (a deleted
     * layer never comes back by a client request), did_reset_layer says SERVER_RESET. */
    char url[512];
    snprintf(url, sizeof url, "%s/api/documents/doc-observers/layers/~", server.url);
    char *argv[] = {"/usr/bin/python3", "-c",
                    "import sys, urllib.request as u; h={'Authorization': 'Token token=\"secret\"', "
                    "'Content-Type': 'application/json'}; "
                    "u.urlopen(u.Request(sys.argv[1], method='DELETE', headers=h)); "
                    "u.urlopen(u.Request(sys.argv[1].rsplit('/', 1)[0], data=b'{\"name\": \"\"}', method='POST', headers=h))",
                    url, NULL};
    CHECK_MSG(ls_run(argv, NULL) == 0, "admin DELETE and re-create of the layer failed");
    CHECK_OK(layersync_document_create_annotation(document, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":2}", &out, &error), &error);
    layersync_free(out);
    sync_once(document, &events);
    R_WAIT(&a, LS_TIMEOUT_MS, a.reset_layer == 1);
    int reset_code;
    LS_GET(&a, a.reset_code, reset_code);
    CHECK_MSG(reset_code == LAYERSYNC_ERROR_SERVER_RESET, "did_reset_layer code %d", reset_code);

    /* Removed observers got nothing more. */
    int b_events_now, c_finish;
    LS_GET(&b, b.events, b_events_now);
    LS_GET(&c, c.finish_sync, c_finish);
    CHECK_MSG(b_events_now == b_events, "observer b was called after its removal");
    CHECK_MSG(c_finish == 1, "observer c was called after removing itself");

    /* 4. Destroy releases a (still registered) once; b and c stay at one release. */
    ls_client_destroy(client, &events);
    int released_a, released_b, released_c;
    LS_GET(&a, a.release_context, released_a);
    LS_GET(&b, b.release_context, released_b);
    LS_GET(&c, c.release_context, released_c);
    CHECK_MSG(released_a == 1 && released_b == 1 && released_c == 1, "release_context ran %d/%d/%d times", released_a,
              released_b, released_c);
    CHECK_CALLBACK_THREADS(&events);
    ls_events_free(&events);
    return ls_pass("observers");
}
