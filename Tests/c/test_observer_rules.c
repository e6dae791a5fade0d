/* The observer rules of docs/threading.md §5, against the real server, with timestamps:
 * - events arrive per document: an observer of document A never sees document B's events,
 *   and its `document` argument is A's handle;
 * - several observers of one document are called in the order they were added, after the
 *   client delegate, on the client's callback thread;
 * - layersync_observer_remove from another thread while the observer's callback runs returns
 *   only after that callback returned (CLOCK_MONOTONIC timestamps: the callback is held for
 *   HOLD_MS), then release_context runs once;
 * - layersync_observer_remove from inside the observer's own callback returns at once (no
 *   deadlock), release_context runs after that callback returned, no further call arrives;
 * - removing observer 2 from inside observer 1's callback for the same event: observer 2 is
 *   not called for it (no callback starts after the remove), released at once;
 * - an observer without release_context (NULL) can be removed;
 * - layersync_client_destroy while an observer callback is running (held): destroy returns
 *   only after the callback returned, releases the still registered observers once each,
 *   after their last callback, and nothing is called after destroy returned. */
#include "ls_test.h"

#include <stdlib.h>
#include <unistd.h>

#define HOLD_MS 300
#define MAX_TRACE 64

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Shared by every observer of the test: a trace of who was called, in order. */
typedef struct world {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    char trace[MAX_TRACE + 1]; /* one letter per did_finish_sync call: 'D' delegate, 'a'.. observers */
    int trace_len;
} world;

typedef struct obs {
    world *w;
    char letter;
    layersync_document *expected_document;
    pthread_t caller_thread;
    /* counters (under w->mutex) */
    int calls, finish_sync, begin_sync, state_changes, release_context;
    bool wrong_document, on_caller_thread, running, released_while_running;
    int64_t t_release;
    /* hold: did_finish_sync waits for `allow_return` (or a 10 s safety deadline) */
    bool hold, in_hold, allow_return;
    int64_t t_returned; /* when the held callback returned */
    /* self-removal / removal of another observer inside did_finish_sync */
    layersync_observer *remove_in_callback;
    bool removing_self;
    int remove_rc;
    int64_t t_remove_start, t_remove_end;
} obs;

static void world_init(world *w)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mutex, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &attr);
    pthread_condattr_destroy(&attr);
}

static void obs_init(obs *o, world *w, char letter, layersync_document *document)
{
    memset(o, 0, sizeof *o);
    o->w = w;
    o->letter = letter;
    o->expected_document = document;
    o->caller_thread = pthread_self();
}

static void enter(obs *o, layersync_document *document)
{
    pthread_mutex_lock(&o->w->mutex);
    o->calls++;
    o->running = true;
    if (document != o->expected_document) o->wrong_document = true;
    if (pthread_equal(pthread_self(), o->caller_thread)) o->on_caller_thread = true;
}

static void leave(obs *o)
{
    o->running = false;
    pthread_cond_broadcast(&o->w->cond);
    pthread_mutex_unlock(&o->w->mutex);
}

static void on_begin_sync(void *c, layersync_document *d)
{
    obs *o = c;
    enter(o, d);
    o->begin_sync++;
    leave(o);
}

static void on_state(void *c, layersync_document *d, layersync_document_state_t s)
{
    (void)s;
    obs *o = c;
    enter(o, d);
    o->state_changes++;
    leave(o);
}

static void on_finish_sync(void *c, layersync_document *d)
{
    obs *o = c;
    enter(o, d);
    world *w = o->w;
    o->finish_sync++;
    if (w->trace_len < MAX_TRACE) w->trace[w->trace_len++] = o->letter;
    if (o->hold) {
        o->hold = false;
        o->in_hold = true;
        pthread_cond_broadcast(&w->cond);
        struct timespec deadline;
        ls_deadline(&deadline, 10000);
        while (!o->allow_return)
            if (pthread_cond_timedwait(&w->cond, &w->mutex, &deadline) == ETIMEDOUT) break;
        o->in_hold = false;
    }
    if (o->remove_in_callback) {
        layersync_observer *target = o->remove_in_callback;
        o->remove_in_callback = NULL;
        pthread_mutex_unlock(&w->mutex); /* release_context takes the mutex */
        int64_t start = now_ns();
        int rc = layersync_observer_remove(target, NULL);
        int64_t end = now_ns();
        pthread_mutex_lock(&w->mutex);
        o->remove_rc = rc;
        o->t_remove_start = start;
        o->t_remove_end = end;
    }
    o->t_returned = now_ns();
    leave(o);
}

static void on_release(void *c)
{
    obs *o = c;
    pthread_mutex_lock(&o->w->mutex);
    if (o->running) o->released_while_running = true;
    o->release_context++;
    o->t_release = now_ns();
    pthread_cond_broadcast(&o->w->cond);
    pthread_mutex_unlock(&o->w->mutex);
}

static layersync_observer *add(layersync_document *document, obs *o, bool with_release)
{
    layersync_document_observer table = LAYERSYNC_DOCUMENT_OBSERVER_INIT;
    table.context = o;
    table.release_context = with_release ? on_release : NULL;
    table.did_begin_sync = on_begin_sync;
    table.did_change_sync_state = on_state;
    table.did_finish_sync = on_finish_sync;
    layersync_observer *registration = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_add_observer(document, &table, &registration, &error), &error);
    CHECK(registration != NULL);
    return registration;
}

/* The delegate's did_finish_sync hook: 'D' in the trace, before the observers. */
static world *g_world;
static void delegate_finish_sync(ls_events *events, layersync_document *document)
{
    (void)events;
    (void)document;
    pthread_mutex_lock(&g_world->mutex);
    if (g_world->trace_len < MAX_TRACE) g_world->trace[g_world->trace_len++] = 'D';
    pthread_mutex_unlock(&g_world->mutex);
}

/* One local edit and a sync; waits for the delegate's did_finish_sync. */
static void edit_and_sync(layersync_document *document, ls_events *events, int page)
{
    char json[192], *out = NULL;
    snprintf(json, sizeof json, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":%d}", page);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_create_annotation(document, json, &out, &error), &error);
    layersync_free(out);
    int finished;
    LS_GET(events, events->did_finish_sync, finished);
    CHECK_OK(layersync_document_sync(document, &error), &error);
    LS_WAIT(events, LS_TIMEOUT_MS, events->did_finish_sync > finished || events->did_fail_sync > 0);
    int failed;
    LS_GET(events, events->did_fail_sync, failed);
    CHECK_MSG(failed == 0, "sync failed");
}

typedef struct {
    layersync_observer *observer;
    layersync_client *client;
    ls_events *events;
    int rc;
    int64_t t_start, t_end;
} remover_args;

static void *remover(void *argument)
{
    remover_args *args = argument;
    args->t_start = now_ns();
    args->rc = layersync_observer_remove(args->observer, NULL);
    args->t_end = now_ns();
    return NULL;
}

static void *destroyer(void *argument)
{
    remover_args *args = argument;
    args->t_start = now_ns();
    args->rc = layersync_client_destroy(args->client, NULL);
    args->t_end = now_ns();
    return NULL;
}

#define MS(ns) ((double)(ns) / 1e6)

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-a");
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-b");
    world w;
    world_init(&w);
    g_world = &w;
    ls_events events;
    ls_events_init(&events);
    events.on_finish_sync = delegate_finish_sync;
    layersync_client *client = NULL;
    layersync_document *doc_a = ls_open_downloaded(&server, "doc-a", NULL, "alice", &events, &client, NULL);
    char *jwt_b = ls_server_mint_token(&server, "doc-b", NULL, "alice", 0);
    layersync_document *doc_b = ls_document(client, jwt_b);
    ls_download(doc_b, &events);

    /* 1. Per document, several observers, order: delegate first, then a, b, c as added. */
    obs a, b, c, x, n;
    obs_init(&a, &w, 'a', doc_a);
    obs_init(&b, &w, 'b', doc_a);
    obs_init(&c, &w, 'c', doc_a);
    obs_init(&x, &w, 'x', doc_b);
    obs_init(&n, &w, 'n', doc_a);
    layersync_observer *reg_a = add(doc_a, &a, true);
    layersync_observer *reg_b = add(doc_a, &b, true);
    layersync_observer *reg_c = add(doc_a, &c, true);
    layersync_observer *reg_x = add(doc_b, &x, true);
    layersync_observer *reg_n = add(doc_a, &n, false); /* no release_context */
    (void)reg_a;

    edit_and_sync(doc_a, &events, 0);
    LS_WAIT(&w, LS_TIMEOUT_MS, a.finish_sync == 1 && b.finish_sync == 1 && c.finish_sync == 1 && n.finish_sync == 1);
    pthread_mutex_lock(&w.mutex);
    CHECK_LATER(strcmp(w.trace, "Dabcn") == 0, "call order \"%s\", expected \"Dabcn\" (delegate, then observers as added)", w.trace);
    CHECK_LATER(x.calls == 0, "observer of doc-b got %d calls for doc-a's sync", x.calls);
    CHECK_LATER(a.begin_sync == 1 && a.state_changes >= 2, "observer a: begin %d, states %d", a.begin_sync, a.state_changes);
    pthread_mutex_unlock(&w.mutex);

    edit_and_sync(doc_b, &events, 0);
    LS_WAIT(&w, LS_TIMEOUT_MS, x.finish_sync == 1);
    pthread_mutex_lock(&w.mutex);
    CHECK_LATER(a.finish_sync == 1 && a.begin_sync == 1, "observer of doc-a saw doc-b's sync");
    w.trace_len = 0;
    memset(w.trace, 0, sizeof w.trace);
    pthread_mutex_unlock(&w.mutex);

    /* 2. Removal from another thread waits for the running callback (timestamps). */
    pthread_mutex_lock(&w.mutex);
    b.hold = true;
    pthread_mutex_unlock(&w.mutex);
    int64_t t_sync = now_ns();
    char *out = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_create_annotation(doc_a, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":1}", &out, &error), &error);
    layersync_free(out);
    CHECK_OK(layersync_document_sync(doc_a, &error), &error);
    LS_WAIT(&w, LS_TIMEOUT_MS, b.in_hold);
    remover_args rb = {.observer = reg_b};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, remover, &rb) == 0);
    usleep(HOLD_MS * 1000);
    int64_t t_allow;
    pthread_mutex_lock(&w.mutex);
    t_allow = now_ns();
    b.allow_return = true;
    pthread_cond_broadcast(&w.cond);
    pthread_mutex_unlock(&w.mutex);
    pthread_join(thread, NULL);
    int64_t b_returned, b_release;
    int b_released, b_calls;
    bool b_early;
    pthread_mutex_lock(&w.mutex);
    b_returned = b.t_returned;
    b_release = b.t_release;
    b_released = b.release_context;
    b_early = b.released_while_running;
    b_calls = b.calls;
    pthread_mutex_unlock(&w.mutex);
    printf("remove from another thread: called %.1f ms after the sync started, returned %.1f ms later; "
           "callback returned at +%.1f ms, release_context at +%.1f ms (relative to remove's start)\n",
           MS(rb.t_start - t_sync), MS(rb.t_end - rb.t_start), MS(b_returned - rb.t_start), MS(b_release - rb.t_start));
    CHECK_LATER(rb.rc == LAYERSYNC_OK, "remove rc %d", rb.rc);
    CHECK_LATER(rb.t_end >= t_allow && rb.t_end >= b_returned,
                "layersync_observer_remove returned %.1f ms before its running callback returned",
                MS(b_returned - rb.t_end));
    CHECK_LATER(b_released == 1 && !b_early && b_release >= b_returned && b_release <= rb.t_end,
                "release_context: %d times, while running %d, %.1f ms after the callback returned, before remove returned %d",
                b_released, b_early, MS(b_release - b_returned), b_release <= rb.t_end);
    LS_WAIT(&w, LS_TIMEOUT_MS, c.finish_sync == 2 && n.finish_sync == 2);
    pthread_mutex_lock(&w.mutex);
    CHECK_LATER(strcmp(w.trace, "Dabcn") == 0, "trace \"%s\" (b held, then removed after it returned)", w.trace);
    w.trace_len = 0;
    memset(w.trace, 0, sizeof w.trace);
    /* 3. Next sync: a removes c (another observer, not yet called for this event) and n removes
     *    itself, both inside did_finish_sync. */
    a.remove_in_callback = reg_c;
    n.remove_in_callback = reg_n;
    n.removing_self = true;
    pthread_mutex_unlock(&w.mutex);
    edit_and_sync(doc_a, &events, 2);
    LS_WAIT(&w, LS_TIMEOUT_MS, n.finish_sync == 3 && c.release_context == 1);
    pthread_mutex_lock(&w.mutex);
    CHECK_LATER(strcmp(w.trace, "Dan") == 0, "trace \"%s\": c must not be called after a removed it", w.trace);
    CHECK_LATER(a.remove_rc == LAYERSYNC_OK && n.remove_rc == LAYERSYNC_OK, "remove in callback rc %d / %d", a.remove_rc,
                n.remove_rc);
    CHECK_LATER(c.release_context == 1 && !c.released_while_running && c.t_release <= a.t_remove_end,
                "c (not running) must be released once, before a's remove returned");
    CHECK_LATER(n.t_remove_end - n.t_remove_start < 1000000000LL, "self-removal took %.1f ms",
                MS(n.t_remove_end - n.t_remove_start));
    CHECK_LATER(n.release_context == 0, "release_context of an observer without one?");
    int c_calls = c.calls, n_calls = n.calls;
    w.trace_len = 0;
    memset(w.trace, 0, sizeof w.trace);
    pthread_mutex_unlock(&w.mutex);
    edit_and_sync(doc_a, &events, 3);
    LS_WAIT(&w, LS_TIMEOUT_MS, a.finish_sync == 4);
    pthread_mutex_lock(&w.mutex);
    CHECK_LATER(strcmp(w.trace, "Da") == 0, "trace \"%s\" after removals", w.trace);
    CHECK_LATER(b.calls == b_calls && c.calls == c_calls && n.calls == n_calls,
                "removed observers were called again: b %d->%d c %d->%d n %d->%d", b_calls, b.calls, c_calls, c.calls,
                n_calls, n.calls);
    pthread_mutex_unlock(&w.mutex);

    /* 4. Destroy while an observer callback is running (a holds in did_finish_sync). */
    pthread_mutex_lock(&w.mutex);
    a.hold = true;
    a.allow_return = false;
    pthread_mutex_unlock(&w.mutex);
    CHECK_OK(layersync_document_create_annotation(doc_a, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":4}", &out, &error), &error);
    layersync_free(out);
    CHECK_OK(layersync_document_sync(doc_a, &error), &error);
    CHECK_OK(layersync_document_sync(doc_b, &error), &error); /* more work queued behind it */
    LS_WAIT(&w, LS_TIMEOUT_MS, a.in_hold);
    remover_args rd = {.client = client};
    CHECK(pthread_create(&thread, NULL, destroyer, &rd) == 0);
    usleep(HOLD_MS * 1000);
    pthread_mutex_lock(&w.mutex);
    bool still_held = a.in_hold;
    int a_released_before = a.release_context;
    t_allow = now_ns();
    a.allow_return = true;
    pthread_cond_broadcast(&w.cond);
    pthread_mutex_unlock(&w.mutex);
    pthread_join(thread, NULL);
    int released_ev;
    LS_GET(&events, events.release_context, released_ev);
    pthread_mutex_lock(&w.mutex);
    printf("destroy: returned %.1f ms after it was called; a's callback returned at +%.1f ms\n", MS(rd.t_end - rd.t_start),
           MS(a.t_returned - rd.t_start));
    CHECK_LATER(rd.rc == LAYERSYNC_OK, "destroy rc %d", rd.rc);
    CHECK_LATER(still_held && a_released_before == 0, "destroy released a while its callback was running");
    CHECK_LATER(rd.t_end >= t_allow && rd.t_end >= a.t_returned, "destroy returned before the running observer callback");
    CHECK_LATER(a.release_context == 1 && a.t_release >= a.t_returned && !a.released_while_running,
                "a released %d times (after its callback: %d)", a.release_context, a.t_release >= a.t_returned);
    CHECK_LATER(x.release_context == 1, "x (doc-b, registered) released %d times", x.release_context);
    CHECK_LATER(b.release_context == 1 && c.release_context == 1, "removed observers released again by destroy");
    int calls_at_destroy = a.calls + x.calls;
    pthread_mutex_unlock(&w.mutex);
    CHECK_LATER(released_ev == 1, "delegate release_context ran %d times", released_ev);
    usleep(300000);
    pthread_mutex_lock(&w.mutex);
    CHECK_LATER(a.calls + x.calls == calls_at_destroy, "observer called after layersync_client_destroy returned");
    CHECK_LATER(!a.wrong_document && !b.wrong_document && !c.wrong_document && !x.wrong_document && !n.wrong_document,
                "an observer got another document's handle");
    CHECK_LATER(!a.on_caller_thread && !x.on_caller_thread, "observer called on the test's thread");
    pthread_mutex_unlock(&w.mutex);
    (void)reg_x;

    CHECK_CALLBACK_THREADS(&events);
    ls_events_free(&events);
    free(jwt_b);
    return ls_pass("observer_rules");
}
