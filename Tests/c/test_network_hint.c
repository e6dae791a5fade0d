/* The delegate's `is_network_available` reachability hint (docs/threading.md §8).
 *
 * The client talks to the REAL server through a small TCP proxy in this file that counts
 * every connection the client opens, so "no request was attempted" is a count that did not
 * move. The proxy either forwards to the server or resets each connection at once (a
 * transport failure: no HTTP answer). Checked:
 *   A. no hint call while requests succeed; after a request failed at the transport level the
 *      hint is asked on the client's callback thread (before that failure's did_fail_sync),
 *      and while it answers false: syncs fail fast with REQUEST_FAILED, edits stay pending,
 *      a long-poll waits, no connection is opened, and the hint is asked again periodically;
 *      when it answers true the pending edits reach the server without another sync call and
 *      the long-poll resumes;
 *   B. an explicit set_network_available(false) wins over a hint answering true;
 *   C. an explicit set_network_available(true) overrides the hint's last false;
 *   D. a NULL hint keeps the old behaviour: every sync tries the network again.
 */
#include "ls_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- A counting TCP proxy in front of the real server ---------------------------------- */

enum { PROXY_FORWARD, PROXY_RESET };
#define PROXY_MAX_CONNECTIONS 512

typedef struct {
    int client, upstream;
    pthread_t thread;
} proxy_connection;

typedef struct {
    int listen_fd;
    int upstream_port;
    char url[64];
    pthread_t accept_thread;
    pthread_mutex_t mutex;
    int mode;
    int accepted; /* connections the client opened, in either mode */
    int count;
    proxy_connection *connections[PROXY_MAX_CONNECTIONS];
} proxy;

static bool send_all(int fd, const char *data, ssize_t size)
{
    while (size > 0) {
        ssize_t sent = send(fd, data, (size_t)size, MSG_NOSIGNAL);
        if (sent <= 0) return false;
        data += sent;
        size -= sent;
    }
    return true;
}

static void *proxy_pump(void *arg)
{
    proxy_connection *c = arg;
    struct pollfd fds[2] = {{.fd = c->client, .events = POLLIN}, {.fd = c->upstream, .events = POLLIN}};
    static __thread char buffer[65536];
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        bool ended = false;
        for (int i = 0; i < 2 && !ended; i++) {
            if (fds[i].revents == 0) continue;
            ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
            if (n <= 0 || !send_all(fds[1 - i].fd, buffer, n)) ended = true;
        }
        if (ended) break;
    }
    shutdown(c->client, SHUT_RDWR);
    shutdown(c->upstream, SHUT_RDWR);
    return NULL;
}

static void *proxy_accept_loop(void *arg)
{
    proxy *p = arg;
    for (;;) {
        int fd = accept(p->listen_fd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return NULL; /* proxy_stop shut the listener down */
        }
        pthread_mutex_lock(&p->mutex);
        p->accepted++;
        int mode = p->mode;
        pthread_mutex_unlock(&p->mutex);
        if (mode == PROXY_RESET) {
            struct linger reset = {.l_onoff = 1, .l_linger = 0}; /* close sends RST */
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
            close(fd);
            continue;
        }
        int upstream = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->upstream_port)};
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (upstream < 0 || connect(upstream, (struct sockaddr *)&addr, sizeof addr) != 0) {
            if (upstream >= 0) close(upstream);
            close(fd);
            continue;
        }
        proxy_connection *c = calloc(1, sizeof *c);
        c->client = fd;
        c->upstream = upstream;
        pthread_mutex_lock(&p->mutex);
        CHECK_MSG(p->count < PROXY_MAX_CONNECTIONS, "proxy: more than %d connections", PROXY_MAX_CONNECTIONS);
        p->connections[p->count++] = c;
        CHECK(pthread_create(&c->thread, NULL, proxy_pump, c) == 0);
        pthread_mutex_unlock(&p->mutex);
    }
}

static void proxy_start(proxy *p, const char *server_url)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mutex, NULL);
    CHECK(sscanf(server_url, "http://127.0.0.1:%d", &p->upstream_port) == 1);
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(p->listen_fd >= 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(p->listen_fd, (struct sockaddr *)&addr, sizeof addr) == 0);
    CHECK(listen(p->listen_fd, 64) == 0);
    socklen_t len = sizeof addr;
    CHECK(getsockname(p->listen_fd, (struct sockaddr *)&addr, &len) == 0);
    snprintf(p->url, sizeof p->url, "http://127.0.0.1:%u", (unsigned)ntohs(addr.sin_port));
    CHECK(pthread_create(&p->accept_thread, NULL, proxy_accept_loop, p) == 0);
}

/* PROXY_RESET also cuts the forwarded connections that are open (kept-alive, long-polls). */
static void proxy_set_mode(proxy *p, int mode)
{
    pthread_mutex_lock(&p->mutex);
    p->mode = mode;
    if (mode == PROXY_RESET) {
        for (int i = 0; i < p->count; i++) {
            shutdown(p->connections[i]->client, SHUT_RDWR);
            shutdown(p->connections[i]->upstream, SHUT_RDWR);
        }
    }
    pthread_mutex_unlock(&p->mutex);
}

static int proxy_accepted(proxy *p)
{
    pthread_mutex_lock(&p->mutex);
    int accepted = p->accepted;
    pthread_mutex_unlock(&p->mutex);
    return accepted;
}

static void proxy_stop(proxy *p)
{
    shutdown(p->listen_fd, SHUT_RDWR); /* wakes accept() */
    pthread_join(p->accept_thread, NULL);
    close(p->listen_fd);
    for (int i = 0; i < p->count; i++) {
        proxy_connection *c = p->connections[i];
        shutdown(c->client, SHUT_RDWR);
        shutdown(c->upstream, SHUT_RDWR);
        pthread_join(c->thread, NULL);
        close(c->client);
        close(c->upstream);
        free(c);
    }
    pthread_mutex_destroy(&p->mutex);
}

/* ---- The hint --------------------------------------------------------------------------- */

/* Guarded by the ls_events mutex (so LS_WAIT can wait on it). */
typedef struct {
    bool answer;                 /* what the hint returns */
    int calls;
    int true_answers;            /* calls that returned true */
    bool have_thread;
    pthread_t thread;            /* the thread of the first call */
    bool on_other_thread;        /* a later call ran on another thread */
    bool on_caller_thread;       /* a call ran on the test's thread */
    bool overlapped;             /* a call ran while another callback of the client ran */
    layersync_document *document; /* read from inside the hint: callbacks may call the API */
} hint_state;

static bool on_is_network_available(void *context)
{
    ls_events *ev = context;
    CHECK_MSG(ev != NULL && ev->magic != 0 && ev->user != NULL, "is_network_available got context %p", context);
    pthread_mutex_lock(&ev->mutex);
    hint_state *hint = ev->user;
    pthread_t self = pthread_self();
    if (!hint->have_thread) {
        hint->have_thread = true;
        hint->thread = self;
    } else if (!pthread_equal(self, hint->thread)) {
        hint->on_other_thread = true;
    }
    if (pthread_equal(self, ev->caller_thread)) hint->on_caller_thread = true;
    if (ev->in_callback > 0) hint->overlapped = true;
    layersync_document *document = hint->document;
    pthread_mutex_unlock(&ev->mutex);

    /* The hint may call the API (no engine lock is held): read the store. */
    if (document != NULL) (void)layersync_document_has_unsynced_changes(document);

    pthread_mutex_lock(&ev->mutex);
    hint->calls++;
    bool answer = hint->answer;
    if (answer) hint->true_answers++;
    pthread_cond_broadcast(&ev->cond);
    pthread_mutex_unlock(&ev->mutex);
    return answer;
}

static void set_answer(ls_events *ev, hint_state *hint, bool answer)
{
    pthread_mutex_lock(&ev->mutex);
    hint->answer = answer;
    pthread_mutex_unlock(&ev->mutex);
}

/* ---- Helpers ---------------------------------------------------------------------------- */

static char *create_note(layersync_document *document, const char *text)
{
    char json[256];
    snprintf(json, sizeof json,
             "{\"v\":2,\"type\":\"pspdfkit/note\",\"icon\":\"comment\",\"pageIndex\":0,\"bbox\":[10,10,20,20],"
             "\"text\":{\"format\":\"plain\",\"value\":\"%s\"}}",
             text);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;
    CHECK_OK(layersync_document_create_annotation(document, json, &out, &error), &error);
    json_t *created = LS_JSON(out, "create_annotation");
    layersync_free(out);
    char *id = strdup(json_string_value(json_object_get(created, "id")));
    json_decref(created);
    return id;
}

/* Starts a sync and waits for did_fail_sync with REQUEST_FAILED (fails on did_finish_sync). */
static void sync_expect_request_failed(layersync_document *document, ls_events *ev, const char *why)
{
    int failed, finished;
    pthread_mutex_lock(&ev->mutex);
    failed = ev->did_fail_sync;
    finished = ev->did_finish_sync;
    pthread_mutex_unlock(&ev->mutex);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_sync(document, &error), &error);
    LS_WAIT(ev, LS_TIMEOUT_MS, ev->did_fail_sync > failed || ev->did_finish_sync > finished);
    int code, now_finished;
    LS_GET(ev, ev->fail_sync_code, code);
    LS_GET(ev, ev->did_finish_sync, now_finished);
    CHECK_MSG(now_finished == finished, "%s: the sync finished, expected REQUEST_FAILED", why);
    CHECK_MSG(code == LAYERSYNC_ERROR_REQUEST_FAILED, "%s: did_fail_sync %s (%d), expected REQUEST_FAILED", why,
              layersync_error_code_name(code), code);
}

static bool received_id(ls_events *ev, int from, const char *id)
{
    for (int i = from; i < ev->did_receive_changes && i < 64; i++)
        if (ev->received_changes[i] != NULL && strstr(ev->received_changes[i], id) != NULL) return true;
    return false;
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-hint");
    proxy proxy;
    proxy_start(&proxy, server.url);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;

    /* ---- A. The hint, asked after transport failures ------------------------------------ */
    ls_events events;
    ls_events_init(&events);
    hint_state hint;
    memset(&hint, 0, sizeof hint);
    hint.answer = true;
    events.user = &hint;
    layersync_client_options options = ls_client_options(proxy.url, ls_temp_dir("hint-client"));
    layersync_client_delegate delegate = ls_events_delegate(&events);
    delegate.is_network_available = on_is_network_available;
    layersync_client *client = NULL;
    CHECK_OK(layersync_client_create(&options, &delegate, &client, &error), &error);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.server_did_validate >= 1);
    int code;
    LS_GET(&events, events.validate_error_code, code);
    CHECK_MSG(code == 0, "server_did_validate through the proxy: %s", layersync_error_code_name(code));
    char *jwt = ls_server_mint_token(&server, "doc-hint", NULL, "alice", 0);
    layersync_document *document = ls_document(client, jwt);
    ls_download(document, &events);
    pthread_mutex_lock(&events.mutex);
    hint.document = document;
    int calls = hint.calls;
    pthread_mutex_unlock(&events.mutex);
    CHECK_MSG(calls == 0, "the hint was asked %d times although every request got an answer", calls);

    /* The network goes away: the first sync tries, fails without an HTTP answer, and the hint
     * (answering false) is asked before that failure is reported. */
    char *first = create_note(document, "offline one");
    set_answer(&events, &hint, false);
    proxy_set_mode(&proxy, PROXY_RESET);
    int before = proxy_accepted(&proxy);
    sync_expect_request_failed(document, &events, "sync through a resetting proxy");
    int tried = proxy_accepted(&proxy);
    CHECK_MSG(tried > before, "the first sync made no connection (%d), so it did not fail at the transport level", tried);
    LS_GET(&events, hint.calls, calls);
    CHECK_MSG(calls >= 1, "did_fail_sync for a transport failure arrived, but the hint was never asked");

    /* While the hint says false: nothing reaches the network, syncs fail fast, edits stay
     * pending, the long-poll waits, and the hint is asked again (twice here) on its own. */
    CHECK_OK(layersync_document_start_listening(document, &error), &error);
    char *second = create_note(document, "offline two");
    sync_expect_request_failed(document, &events, "sync while the hint says false");
    sync_expect_request_failed(document, &events, "second sync while the hint says false");
    LS_WAIT(&events, LS_TIMEOUT_MS, hint.calls >= calls + 2);
    int now = proxy_accepted(&proxy);
    CHECK_MSG(now == tried, "%d connection(s) opened while the hint answered false", now - tried);
    CHECK(layersync_document_has_unsynced_changes(document));
    int finished;
    LS_GET(&events, events.did_finish_sync, finished);
    CHECK(finished == 0);

    /* The hint says true: the failed sync resumes by itself (no sync call) and the edits
     * arrive; the long-poll resumes too. */
    proxy_set_mode(&proxy, PROXY_FORWARD);
    set_answer(&events, &hint, true);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_finish_sync >= 1);
    CHECK_MSG(!layersync_document_has_unsynced_changes(document), "edits still pending after the hint said true");
    CHECK(proxy_accepted(&proxy) > tried);

    ls_events other_events;
    ls_events_init(&other_events);
    layersync_client *other = NULL;
    layersync_document *other_doc = ls_open_downloaded(&server, "doc-hint", NULL, "bob", &other_events, &other, NULL);
    CHECK_OK(layersync_document_get_annotation(other_doc, first, &out, &error), &error);
    layersync_free(out);
    CHECK_OK(layersync_document_get_annotation(other_doc, second, &out, &error), &error);
    layersync_free(out);
    int received;
    LS_GET(&events, events.did_receive_changes, received);
    char *from_bob = create_note(other_doc, "from bob");
    ls_sync(other_doc, &other_events);
    LS_WAIT(&events, LS_TIMEOUT_MS, received_id(&events, received, from_bob));

    /* ---- B. An explicit false wins over a hint answering true ---------------------------- */
    char *third = create_note(document, "explicitly offline");
    set_answer(&events, &hint, false);
    proxy_set_mode(&proxy, PROXY_RESET);
    sync_expect_request_failed(document, &events, "sync through a resetting proxy (B)");
    int true_answers;
    LS_GET(&events, hint.true_answers, true_answers);
    CHECK_OK(layersync_client_set_network_available(client, false, &error), &error);
    proxy_set_mode(&proxy, PROXY_FORWARD);
    set_answer(&events, &hint, true);
    LS_WAIT(&events, LS_TIMEOUT_MS, hint.true_answers > true_answers); /* the periodic ask */
    tried = proxy_accepted(&proxy);
    LS_GET(&events, events.did_finish_sync, finished);
    sync_expect_request_failed(document, &events, "sync after set_network_available(false), hint true");
    sync_expect_request_failed(document, &events, "second sync after set_network_available(false), hint true");
    now = proxy_accepted(&proxy);
    CHECK_MSG(now == tried, "%d connection(s) opened after set_network_available(false) although the hint said true",
              now - tried);
    int now_finished;
    LS_GET(&events, events.did_finish_sync, now_finished);
    CHECK_MSG(now_finished == finished, "a sync finished while the host said the network is unavailable");
    CHECK(layersync_document_has_unsynced_changes(document));
    CHECK_OK(layersync_client_set_network_available(client, true, &error), &error);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_finish_sync > finished);
    CHECK(!layersync_document_has_unsynced_changes(document));

    /* ---- C. An explicit true overrides the hint's last false ---------------------------- */
    /* The long-poll (checked in A) stops first, so that C exercises only the sync: a long-poll
     * retry started before the explicit true below may fail just after it; the engine ignores
     * such a failure (NetworkHintTests.aRequestInFlightAcrossAnExplicitTrueCannotUndoIt), but a
     * retry started after the true would be a new question for the hint, which says false. */
    CHECK_OK(layersync_document_stop_listening(document, &error), &error);
    char *fourth = create_note(document, "explicitly online");
    set_answer(&events, &hint, false);
    proxy_set_mode(&proxy, PROXY_RESET);
    sync_expect_request_failed(document, &events, "sync through a resetting proxy (C)");
    proxy_set_mode(&proxy, PROXY_FORWARD);
    LS_GET(&events, events.did_finish_sync, finished);
    CHECK_OK(layersync_client_set_network_available(client, true, &error), &error);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_finish_sync > finished);
    CHECK(!layersync_document_has_unsynced_changes(document));
    CHECK_OK(layersync_document_get_annotation(document, fourth, &out, &error), &error);
    layersync_free(out);

    /* Every hint call ran on the client's callback thread, alone, never on the test's. */
    pthread_mutex_lock(&events.mutex);
    bool same_thread = hint.have_thread && events.have_callback_thread && pthread_equal(hint.thread, events.callback_thread);
    bool other_thread = hint.on_other_thread, caller = hint.on_caller_thread, overlapped = hint.overlapped;
    pthread_mutex_unlock(&events.mutex);
    CHECK_LATER(same_thread, "the hint ran on another thread than the client's other callbacks");
    CHECK_LATER(!other_thread, "the hint ran on more than one thread");
    CHECK_LATER(!caller, "the hint ran on the test's thread");
    CHECK_LATER(!overlapped, "the hint ran while another callback of the client ran");
    CHECK_CALLBACK_THREADS(&events);
    ls_client_destroy(client, &events);

    /* ---- D. No hint: every sync tries the network again (the old behaviour) ------------- */
    ls_events plain_events;
    ls_events_init(&plain_events);
    layersync_client *plain = ls_client_create(proxy.url, ls_temp_dir("plain-client"), &plain_events);
    layersync_document *plain_doc = ls_document(plain, jwt);
    ls_download(plain_doc, &plain_events);
    char *fifth = create_note(plain_doc, "no hint");
    proxy_set_mode(&proxy, PROXY_RESET);
    for (int i = 0; i < 3; i++) {
        before = proxy_accepted(&proxy);
        sync_expect_request_failed(plain_doc, &plain_events, "sync without a hint through a resetting proxy");
        now = proxy_accepted(&proxy);
        CHECK_MSG(now > before, "sync %d without a hint made no connection: the engine went offline on its own", i + 1);
    }
    proxy_set_mode(&proxy, PROXY_FORWARD);
    ls_sync(plain_doc, &plain_events);
    CHECK(!layersync_document_has_unsynced_changes(plain_doc));
    ls_sync(other_doc, &other_events);
    CHECK_OK(layersync_document_get_annotation(other_doc, fifth, &out, &error), &error);
    layersync_free(out);
    CHECK_CALLBACK_THREADS(&plain_events);

    ls_client_destroy(plain, &plain_events);
    ls_client_destroy(other, &other_events);
    proxy_stop(&proxy);
    ls_events_free(&plain_events);
    ls_events_free(&other_events);
    ls_events_free(&events);
    free(first);
    free(second);
    free(third);
    free(fourth);
    free(fifth);
    free(from_bob);
    free(jwt);
    ls_server_stop(&server);
    return ls_pass("network_hint");
}
