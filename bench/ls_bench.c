/* Per-call and whole-process measurements of liblayersync through its C ABI, for
 * bench/run.py (scenarios 1, 3, 4, 5 and 7). Python would distort these numbers (ctypes and
 * interpreter overhead per call, interpreter RSS), so they are taken here.
 *
 *   ls_bench download URL STORAGE JWT        scenario 1 + 5: time download() until
 *                                            did_finish_download, then sync(); RSS
 *                                            before/after (empty client vs layer open)
 *   ls_bench create URL STORAGE JWT N        scenario 4: download, then N timed
 *                                            layersync_document_create_annotation calls
 *   ls_bench raw DB_PATH N                   scenario 4 baseline: N timed sqlite3
 *                                            prepared INSERT + COMMIT, WAL, synchronous=FULL
 *   ls_bench latency URL STORAGE JWT_A JWT_B N [full|normal]
 *                                            scenarios 3 + 7: clients A and B on one
 *                                            layer, B listening; N times: A creates an
 *                                            annotation and calls sync(), time until B's
 *                                            did_receive_changes names it (5 warm-up writes);
 *                                            both clients' options.durability (default full)
 *   ls_bench relay URL N [fsync|none [FILE [longpoll|stream]]]
 *                                            scenario 7's floor, no liblayersync: two libcurl
 *                                            clients and bench/relay.py at URL. B, on its own
 *                                            thread, long-polls GET URL/g?since= (longpoll, the
 *                                            default) or reads the event stream GET URL/s
 *                                            (stream); N times (5 warm-up writes): A [pwrite
 *                                            4 KiB + fdatasync on FILE, default
 *                                            ./ls_bench-relay.dat] then POSTs the latency
 *                                            mode's annotation JSON to URL/p; time from A's
 *                                            start until B has parsed the answer or event
 *                                            that carries it
 *
 * Each mode prints one JSON object on stdout. Exit status 0 on success.
 */
#define _GNU_SOURCE
#include <layersync.h>
#include <sqlite3.h>
#include <curl/curl.h>

#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int validated, download_done, download_failed, sync_done, sync_failed;
static double download_end_s, sync_end_s;
/* latency mode: the id B waits for, and when B's did_receive_changes named it */
static char awaited_id[64];
static int awaited_seen;
static double awaited_s;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long rss_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long value = -1;
    size_t n = strlen(field);
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, field, n) == 0) { value = strtol(line + n + 1, NULL, 10); break; }
    }
    fclose(f);
    return value;
}

static void signal_flag(int *flag, double *when) {
    pthread_mutex_lock(&lock);
    *flag = 1;
    if (when) *when = now_s();
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static void on_validate(void *ctx, const char *info, const layersync_error *err) {
    (void)ctx; (void)info; (void)err;
    signal_flag(&validated, NULL);
}
static void on_download(void *ctx, layersync_document *d) { (void)ctx; (void)d; signal_flag(&download_done, &download_end_s); }
static void on_download_fail(void *ctx, layersync_document *d, const layersync_error *e) {
    (void)ctx; (void)d;
    fprintf(stderr, "download failed: %d %s\n", e ? e->code : -1, e && e->message ? e->message : "");
    signal_flag(&download_failed, NULL);
}
static void on_sync(void *ctx, layersync_document *d) { (void)ctx; (void)d; signal_flag(&sync_done, &sync_end_s); }
static void on_sync_fail(void *ctx, layersync_document *d, const layersync_error *e) {
    (void)ctx; (void)d;
    fprintf(stderr, "sync failed: %d %s\n", e ? e->code : -1, e && e->message ? e->message : "");
    signal_flag(&sync_failed, NULL);
}

static void on_receive(void *ctx, layersync_document *d, const char *value) {
    (void)ctx; (void)d;
    double t = now_s();
    pthread_mutex_lock(&lock);
    if (awaited_id[0] && value && strstr(value, awaited_id)) {
        awaited_seen = 1;
        awaited_s = t;
        pthread_cond_broadcast(&cond);
    }
    pthread_mutex_unlock(&lock);
}

static int wait_any(int *a, int *b, double timeout_s) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)timeout_s;
    pthread_mutex_lock(&lock);
    int rc = 0;
    while (!*a && !(b && *b) && rc == 0) rc = pthread_cond_timedwait(&cond, &lock, &deadline);
    int ok = *a;
    pthread_mutex_unlock(&lock);
    return ok;
}

static void die(const char *what, int rc, layersync_error *err) {
    fprintf(stderr, "%s failed: %d %s\n", what, rc, err && err->message ? err->message : "");
    exit(1);
}

static layersync_client *open_client(const char *url, const char *storage, int32_t durability) {
    layersync_client_options opts;
    layersync_client_options_init(&opts, LAYERSYNC_CLIENT_OPTIONS_VERSION);
    opts.durability = durability;
    opts.server_url = url;
    opts.storage_path = storage;
    opts.allow_insecure_http = true;
    opts.sync_delay_s = LAYERSYNC_SYNC_DISABLED;
    layersync_client_delegate del;
    memset(&del, 0, sizeof del);
    del.version = LAYERSYNC_CLIENT_DELEGATE_VERSION;
    del.server_did_validate = on_validate;
    del.did_finish_download = on_download;
    del.did_fail_download = on_download_fail;
    del.did_finish_sync = on_sync;
    del.did_fail_sync = on_sync_fail;
    del.did_receive_changes = on_receive;
    layersync_client *client = NULL;
    layersync_error err = {.version = LAYERSYNC_ERROR_VERSION};
    int rc = layersync_client_create(&opts, &del, &client, &err);
    if (rc != LAYERSYNC_OK) die("layersync_client_create", rc, &err);
    if (!wait_any(&validated, NULL, 30)) { fprintf(stderr, "server_did_validate timed out\n"); exit(1); }
    return client;
}

static layersync_document *download(layersync_client *client, const char *jwt, double *seconds) {
    layersync_document *doc = NULL;
    layersync_error err = {.version = LAYERSYNC_ERROR_VERSION};
    int rc = layersync_client_document_for_jwt(client, jwt, &doc, &err);
    if (rc != LAYERSYNC_OK) die("document_for_jwt", rc, &err);
    double t0 = now_s();
    rc = layersync_document_download(doc, &err);
    if (rc != LAYERSYNC_OK) die("download", rc, &err);
    if (!wait_any(&download_done, &download_failed, 600) ) { fprintf(stderr, "download did not finish\n"); exit(1); }
    *seconds = download_end_s - t0;
    return doc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One JSON object on stdout; `extra` ("" or `"key": value, ...` with a trailing ", ") goes first. */
static void print_latencies(const char *mode, double *us, int n, double total_s, const char *extra) {
    qsort(us, (size_t)n, sizeof *us, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += us[i];
    printf("{%s\"mode\": \"%s\", \"n\": %d, \"p50_us\": %.2f, \"p90_us\": %.2f, \"p99_us\": %.2f, "
           "\"min_us\": %.2f, \"max_us\": %.2f, \"mean_us\": %.2f, \"total_s\": %.4f}\n",
           extra, mode, n, us[n / 2], us[(int)(n * 0.9)], us[(int)(n * 0.99)], us[0], us[n - 1], sum / n, total_s);
}

/* Same JSON shape for the engine and the raw baseline. */
static void annotation_json(char *buf, size_t size, int i, const char *id) {
    snprintf(buf, size,
             "{%s%s%s\"v\": 2, \"type\": \"pspdfkit/note\", \"pageIndex\": %d, \"bbox\": [%d, %d, 24, 24], "
             "\"text\": {\"format\": \"plain\", \"value\": \"bench note %d\"}, \"icon\": \"comment\", \"color\": \"#FFD700\", "
             "\"creatorName\": \"bench\", \"createdAt\": \"2026-01-01T00:00:00Z\", \"updatedAt\": \"2026-01-01T00:00:00Z\"}",
             id ? "\"id\": \"" : "", id ? id : "", id ? "\", " : "", i % 10, i % 500, i % 700, i);
}

static int mode_download(const char *url, const char *storage, const char *jwt) {
    long rss_start = rss_kb("VmRSS:");
    layersync_client *client = open_client(url, storage, LAYERSYNC_DURABILITY_FULL);
    long rss_empty = rss_kb("VmRSS:");
    double download_s = 0;
    layersync_document *doc = download(client, jwt, &download_s);
    long rss_downloaded = rss_kb("VmRSS:");
    layersync_error err = {.version = LAYERSYNC_ERROR_VERSION};
    double t0 = now_s();
    int rc = layersync_document_sync(doc, &err);
    if (rc != LAYERSYNC_OK) die("sync", rc, &err);
    if (!wait_any(&sync_done, &sync_failed, 600)) { fprintf(stderr, "sync did not finish\n"); return 1; }
    double sync_s = sync_end_s - t0;
    long rss_synced = rss_kb("VmRSS:");
    long anon_synced = rss_kb("RssAnon:"), file_synced = rss_kb("RssFile:");
    long peak = rss_kb("VmHWM:");
    /* Diagnosis: how much of the growth is freed memory glibc keeps in its arenas. */
    malloc_trim(0);
    long rss_trimmed = rss_kb("VmRSS:");
    printf("{\"mode\": \"download\", \"download_s\": %.4f, \"sync_s\": %.4f, \"rss_start_kb\": %ld, "
           "\"rss_empty_client_kb\": %ld, \"rss_downloaded_kb\": %ld, \"rss_synced_kb\": %ld, "
           "\"rss_anon_synced_kb\": %ld, \"rss_file_synced_kb\": %ld, \"rss_after_malloc_trim_kb\": %ld, "
           "\"rss_peak_kb\": %ld}\n", download_s, sync_s, rss_start, rss_empty, rss_downloaded,
           rss_synced, anon_synced, file_synced, rss_trimmed, peak);
    fflush(stdout);
    layersync_client_destroy(client, NULL);
    return 0;
}

static int mode_create(const char *url, const char *storage, const char *jwt, int n) {
    layersync_client *client = open_client(url, storage, LAYERSYNC_DURABILITY_FULL);
    double download_s = 0;
    layersync_document *doc = download(client, jwt, &download_s);
    double *us = calloc((size_t)n, sizeof *us);
    char json[1024];
    layersync_error err = {.version = LAYERSYNC_ERROR_VERSION};
    for (int i = 0; i < 20; i++) {  /* warm-up: statement caches, page cache */
        char *out = NULL;
        annotation_json(json, sizeof json, i, NULL);
        int rc = layersync_document_create_annotation(doc, json, &out, &err);
        if (rc != LAYERSYNC_OK) die("create_annotation", rc, &err);
        layersync_free(out);
    }
    double start = now_s();
    for (int i = 0; i < n; i++) {
        char *out = NULL;
        annotation_json(json, sizeof json, i, NULL);
        double t0 = now_s();
        int rc = layersync_document_create_annotation(doc, json, &out, &err);
        us[i] = (now_s() - t0) * 1e6;
        if (rc != LAYERSYNC_OK) die("create_annotation", rc, &err);
        layersync_free(out);
    }
    print_latencies("create", us, n, now_s() - start, "");
    free(us);
    layersync_client_destroy(client, NULL);
    return 0;
}

/* The "id" member of create_annotation's answer, copied into out. */
static void answer_id(const char *answer, char *out, size_t size) {
    const char *p = strstr(answer, "\"id\"");
    if (p) p = strchr(p + 4, '"');
    const char *e = p ? strchr(p + 1, '"') : NULL;
    if (!p || !e || (size_t)(e - p) >= size) { fprintf(stderr, "no id in %s\n", answer); exit(1); }
    memcpy(out, p + 1, (size_t)(e - p - 1));
    out[e - p - 1] = 0;
}

static int mode_latency(const char *url, const char *storage, const char *jwt_a, const char *jwt_b, int n,
                        const char *durability_name) {
    int32_t durability;
    if (strcmp(durability_name, "full") == 0) durability = LAYERSYNC_DURABILITY_FULL;
    else if (strcmp(durability_name, "normal") == 0) durability = LAYERSYNC_DURABILITY_NORMAL;
    else { fprintf(stderr, "durability must be full or normal, not %s\n", durability_name); return 2; }
    char path_a[4096], path_b[4096];
    snprintf(path_a, sizeof path_a, "%s/a", storage);
    snprintf(path_b, sizeof path_b, "%s/b", storage);
    layersync_client *ca = open_client(url, path_a, durability);
    validated = 0;
    layersync_client *cb = open_client(url, path_b, durability);
    double seconds = 0;
    layersync_document *da = download(ca, jwt_a, &seconds);
    download_done = 0;
    layersync_document *db = download(cb, jwt_b, &seconds);
    layersync_error err = {.version = LAYERSYNC_ERROR_VERSION};
    int rc = layersync_document_start_listening(db, &err);
    if (rc != LAYERSYNC_OK) die("start_listening", rc, &err);
    struct timespec settle = {0, 500 * 1000 * 1000};
    nanosleep(&settle, NULL);
    const int warmup = 5;
    double *total = calloc((size_t)n, sizeof *total), *create = calloc((size_t)n, sizeof *create);
    double *sync_call = calloc((size_t)n, sizeof *sync_call);
    char json[1024];
    double start = now_s();
    for (int i = -warmup; i < n; i++) {
        char *out = NULL;
        annotation_json(json, sizeof json, i + warmup, NULL);
        pthread_mutex_lock(&lock);
        sync_done = sync_failed = 0;
        pthread_mutex_unlock(&lock);
        double t0 = now_s();
        rc = layersync_document_create_annotation(da, json, &out, &err);
        double t1 = now_s();
        if (rc != LAYERSYNC_OK) die("create_annotation", rc, &err);
        pthread_mutex_lock(&lock);
        answer_id(out, awaited_id, sizeof awaited_id);
        awaited_seen = 0;
        pthread_mutex_unlock(&lock);
        layersync_free(out);
        rc = layersync_document_sync(da, &err);
        double t2 = now_s();
        if (rc != LAYERSYNC_OK) die("sync", rc, &err);
        if (!wait_any(&awaited_seen, NULL, 10)) { fprintf(stderr, "B did not receive write %d in 10 s\n", i); exit(1); }
        if (!wait_any(&sync_done, &sync_failed, 30) || sync_failed) { fprintf(stderr, "A's sync %d failed\n", i); exit(1); }
        if (i >= 0) {
            total[i] = (awaited_s - t0) * 1e6;
            create[i] = (t1 - t0) * 1e6;
            sync_call[i] = (t2 - t1) * 1e6;
        }
    }
    double elapsed = now_s() - start;
    layersync_document_stop_listening(db, NULL);
    qsort(create, (size_t)n, sizeof *create, cmp_double);
    qsort(sync_call, (size_t)n, sizeof *sync_call, cmp_double);
    char extra[256];
    snprintf(extra, sizeof extra, "\"durability\": \"%s\", \"create_p50_us\": %.2f, \"sync_call_p50_us\": %.2f, ",
             durability_name, create[n / 2], sync_call[n / 2]);
    print_latencies("latency", total, n, elapsed, extra);
    free(total); free(create); free(sync_call);
    layersync_client_destroy(ca, NULL);
    layersync_client_destroy(cb, NULL);
    return 0;
}

static void check_sqlite(sqlite3 *db, int rc, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "%s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

static int mode_raw(const char *path, int n) {
    sqlite3 *db = NULL;
    check_sqlite(db, sqlite3_open(path, &db), "open");
    /* The engine's settings (LayerStore.swift): WAL, synchronous=FULL. */
    check_sqlite(db, sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                                  "CREATE TABLE IF NOT EXISTS records(id TEXT PRIMARY KEY NOT NULL, content TEXT);",
                                  NULL, NULL, NULL), "schema");
    sqlite3_stmt *begin, *insert, *commit;
    check_sqlite(db, sqlite3_prepare_v2(db, "BEGIN IMMEDIATE", -1, &begin, NULL), "prepare");
    check_sqlite(db, sqlite3_prepare_v2(db, "INSERT INTO records(id, content) VALUES (?, ?)", -1, &insert, NULL), "prepare");
    check_sqlite(db, sqlite3_prepare_v2(db, "COMMIT", -1, &commit, NULL), "prepare");
    double *us = calloc((size_t)n, sizeof *us);
    char json[1024], id[32];
    double start = 0;
    for (int i = -20; i < n; i++) {  /* 20 warm-up rows */
        if (i == 0) start = now_s();
        snprintf(id, sizeof id, "01BENCH%019d", i + 20);
        annotation_json(json, sizeof json, i, id);
        double t0 = now_s();
        check_sqlite(db, sqlite3_step(begin), "begin");
        sqlite3_reset(begin);
        sqlite3_bind_text(insert, 1, id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(insert, 2, json, -1, SQLITE_TRANSIENT);
        check_sqlite(db, sqlite3_step(insert), "insert");
        sqlite3_reset(insert);
        check_sqlite(db, sqlite3_step(commit), "commit");
        sqlite3_reset(commit);
        if (i >= 0) us[i] = (now_s() - t0) * 1e6;
    }
    print_latencies("raw", us, n, now_s() - start, "");
    sqlite3_finalize(begin); sqlite3_finalize(insert); sqlite3_finalize(commit);
    sqlite3_close(db);
    free(us);
    return 0;
}

/* -- relay mode: the architecture's floor (bench/relay.py), no liblayersync ------------- */

struct http_buf { char data[65536]; size_t n; };

static size_t http_write(char *p, size_t size, size_t nmemb, void *user) {
    struct http_buf *b = user;
    size_t k = size * nmemb;
    if (b->n + k >= sizeof b->data) return 0;  /* too big: libcurl reports a write error */
    memcpy(b->data + b->n, p, k);
    b->n += k;
    b->data[b->n] = 0;
    return k;
}

/* The "revision" member of a relay answer, or -1. */
static long relay_revision(const char *body) {
    const char *p = strstr(body, "\"revision\":");
    return p ? strtol(p + 11, NULL, 10) : -1;
}

static const char *relay_url;
static long relay_rev;             /* last revision B parsed */
static double relay_at;            /* when */
static char relay_body[2048];      /* the answer it came in (checked by A) */
static int relay_stop, relay_error;

static void *relay_listener(void *arg) {
    (void)arg;
    CURL *h = curl_easy_init();
    static struct http_buf b;
    char url[1024];
    long since = 0;
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, http_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    for (;;) {
        pthread_mutex_lock(&lock);
        int stop = relay_stop;
        pthread_mutex_unlock(&lock);
        if (stop) break;
        snprintf(url, sizeof url, "%s/g?since=%ld", relay_url, since);
        curl_easy_setopt(h, CURLOPT_URL, url);
        b.n = 0;
        b.data[0] = 0;
        CURLcode rc = curl_easy_perform(h);
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        long rev = rc == CURLE_OK && status == 200 ? relay_revision(b.data) : -1;
        double t = now_s();
        pthread_mutex_lock(&lock);
        if (rev < 0) {
            fprintf(stderr, "relay long-poll failed: %s, HTTP %ld: %.200s\n", curl_easy_strerror(rc), status, b.data);
            relay_error = 1;
        } else if (rev > relay_rev) {
            relay_rev = rev;
            relay_at = t;
            snprintf(relay_body, sizeof relay_body, "%s", b.data);
        }
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
        if (rev < 0) break;
        since = rev;
    }
    curl_easy_cleanup(h);
    return NULL;
}

/* B's side of the relay's stream: the events of one GET URL/s, each "data: <json>" and a
 * blank line. A complete event's revision and text go where the long-poll's answer goes. */
static struct http_buf relay_events;

static size_t relay_stream_write(char *p, size_t size, size_t nmemb, void *user) {
    (void)user;
    size_t k = http_write(p, size, nmemb, &relay_events);
    if (k == 0) return 0;
    double t = now_s();
    char *end;
    while ((end = strstr(relay_events.data, "\n\n")) != NULL) {
        *end = 0;
        long rev = strncmp(relay_events.data, "data: ", 6) == 0 ? relay_revision(relay_events.data) : -1;
        pthread_mutex_lock(&lock);
        if (rev > relay_rev) {
            relay_rev = rev;
            relay_at = t;
            snprintf(relay_body, sizeof relay_body, "%.*s", (int)sizeof relay_body - 1, relay_events.data);
        }
        int stop = relay_stop;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
        size_t used = (size_t)(end + 2 - relay_events.data);
        memmove(relay_events.data, end + 2, relay_events.n - used + 1);
        relay_events.n -= used;
        if (stop) return 0;  /* ends the transfer: CURLE_WRITE_ERROR, expected */
    }
    return k;
}

static void *relay_stream_listener(void *arg) {
    (void)arg;
    CURL *h = curl_easy_init();
    char url[1024];
    snprintf(url, sizeof url, "%s/s", relay_url);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, relay_stream_write);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    CURLcode rc = curl_easy_perform(h);
    pthread_mutex_lock(&lock);
    if (!(rc == CURLE_WRITE_ERROR && relay_stop)) {
        fprintf(stderr, "relay stream ended: %s\n", curl_easy_strerror(rc));
        relay_error = 1;
    }
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    curl_easy_cleanup(h);
    return NULL;
}

/* A's POST of body to URL/p; returns the revision the relay answers. */
static long relay_post(CURL *a, struct http_buf *b, const char *body) {
    b->n = 0;
    b->data[0] = 0;
    curl_easy_setopt(a, CURLOPT_POSTFIELDS, body);
    CURLcode rc = curl_easy_perform(a);
    long status = 0;
    curl_easy_getinfo(a, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK || status != 200) {
        fprintf(stderr, "relay POST failed: %s, HTTP %ld: %.200s\n", curl_easy_strerror(rc), status, b->data);
        exit(1);
    }
    return relay_revision(b->data);
}

static int mode_relay(const char *url, int n, const char *sync_name, const char *file, const char *transport) {
    int dosync;
    if (strcmp(sync_name, "fsync") == 0) dosync = 1;
    else if (strcmp(sync_name, "none") == 0) dosync = 0;
    else { fprintf(stderr, "relay: fsync or none, not %s\n", sync_name); return 2; }
    void *(*listen)(void *);
    if (strcmp(transport, "longpoll") == 0) listen = relay_listener;
    else if (strcmp(transport, "stream") == 0) listen = relay_stream_listener;
    else { fprintf(stderr, "relay: longpoll or stream, not %s\n", transport); return 2; }
    if (n < 1) { fprintf(stderr, "relay: N must be >= 1\n"); return 2; }
    relay_url = url;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    /* A's durable write: one 4 KiB page (SQLite's page size) overwritten in place in a
     * preallocated 1 MiB file, then fdatasync: the least rule 1 costs on this disk. */
    int fd = open(file, O_RDWR | O_CREAT, 0600);
    if (fd < 0) { perror(file); return 1; }
    char page[4096];
    memset(page, 'x', sizeof page);
    for (int i = 0; i < 256; i++)
        if (pwrite(fd, page, sizeof page, (off_t)i * 4096) != (ssize_t)sizeof page) { perror("pwrite"); return 1; }
    if (fsync(fd) != 0) { perror("fsync"); return 1; }

    pthread_t listener;
    pthread_create(&listener, NULL, listen, NULL);
    struct timespec settle = {0, 300 * 1000 * 1000};  /* B's first long-poll parks, or its stream opens */
    nanosleep(&settle, NULL);

    CURL *a = curl_easy_init();
    static struct http_buf ab;
    char post_url[1024];
    snprintf(post_url, sizeof post_url, "%s/p", url);
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(a, CURLOPT_URL, post_url);
    curl_easy_setopt(a, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(a, CURLOPT_WRITEFUNCTION, http_write);
    curl_easy_setopt(a, CURLOPT_WRITEDATA, &ab);
    curl_easy_setopt(a, CURLOPT_TCP_NODELAY, 1L);

    const int warmup = 5;
    double *total = calloc((size_t)n, sizeof *total), *sync_us = calloc((size_t)n, sizeof *sync_us);
    double *post_us = calloc((size_t)n, sizeof *post_us);
    char json[1024], marker[64];
    double start = now_s();
    for (int i = -warmup; i < n; i++) {
        annotation_json(json, sizeof json, i + warmup, NULL);
        snprintf(marker, sizeof marker, "\"bench note %d\"", i + warmup);
        memcpy(page, json, strlen(json));
        pthread_mutex_lock(&lock);
        long want = relay_rev + 1;
        pthread_mutex_unlock(&lock);
        /* B's next long-poll parks at the relay first, as in steady state (floor.c's pause). */
        struct timespec pause = {0, 2 * 1000 * 1000};
        nanosleep(&pause, NULL);
        double t0 = now_s();
        if (dosync) {
            if (pwrite(fd, page, sizeof page, (off_t)((i + warmup) & 255) * 4096) != (ssize_t)sizeof page ||
                fdatasync(fd) != 0) { perror("pwrite/fdatasync"); return 1; }
        }
        double t1 = now_s();
        long rev = relay_post(a, &ab, json);
        double t2 = now_s();
        if (rev != want) { fprintf(stderr, "relay answered revision %ld, expected %ld\n", rev, want); return 1; }
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 10;
        pthread_mutex_lock(&lock);
        int rc = 0;
        while (relay_rev < want && !relay_error && rc == 0) rc = pthread_cond_timedwait(&cond, &lock, &deadline);
        int ok = relay_rev == want && strstr(relay_body, marker) != NULL;
        double seen = relay_at;
        pthread_mutex_unlock(&lock);
        if (!ok) {
            fprintf(stderr, "B did not receive write %d (revision %ld) within 10 s: revision %ld, %.200s\n",
                    i, want, relay_rev, relay_body);
            return 1;
        }
        if (i >= 0) {
            total[i] = (seen - t0) * 1e6;
            sync_us[i] = (t1 - t0) * 1e6;
            post_us[i] = (t2 - t1) * 1e6;
        }
    }
    double elapsed = now_s() - start;
    /* Stop B: flag, then one more POST wakes its parked long-poll (or ends its stream). */
    pthread_mutex_lock(&lock);
    relay_stop = 1;
    pthread_mutex_unlock(&lock);
    relay_post(a, &ab, "{}");
    pthread_join(listener, NULL);
    qsort(sync_us, (size_t)n, sizeof *sync_us, cmp_double);
    qsort(post_us, (size_t)n, sizeof *post_us, cmp_double);
    char extra[256];
    snprintf(extra, sizeof extra, "\"sync\": \"%s\", \"transport\": \"%s\", \"fdatasync_p50_us\": %.2f, "
             "\"post_p50_us\": %.2f, ", sync_name, transport, sync_us[n / 2], post_us[n / 2]);
    print_latencies("relay", total, n, elapsed, extra);
    free(total); free(sync_us); free(post_us);
    curl_slist_free_all(headers);
    curl_easy_cleanup(a);
    curl_global_cleanup();
    close(fd);
    return relay_error;
}

int main(int argc, char **argv) {
    if (argc >= 5 && strcmp(argv[1], "download") == 0) return mode_download(argv[2], argv[3], argv[4]);
    if (argc >= 6 && strcmp(argv[1], "create") == 0) return mode_create(argv[2], argv[3], argv[4], atoi(argv[5]));
    if (argc >= 4 && strcmp(argv[1], "raw") == 0) return mode_raw(argv[2], atoi(argv[3]));
    if (argc >= 7 && strcmp(argv[1], "latency") == 0)
        return mode_latency(argv[2], argv[3], argv[4], argv[5], atoi(argv[6]), argc >= 8 ? argv[7] : "full");
    if (argc >= 4 && strcmp(argv[1], "relay") == 0)
        return mode_relay(argv[2], atoi(argv[3]), argc >= 5 ? argv[4] : "none",
                          argc >= 6 ? argv[5] : "ls_bench-relay.dat", argc >= 7 ? argv[6] : "longpoll");
    fprintf(stderr, "usage: ls_bench download URL STORAGE JWT | create URL STORAGE JWT N | raw DB N | "
                    "latency URL STORAGE JWT_A JWT_B N [full|normal] | relay URL N [fsync|none [FILE [longpoll|stream]]]\n");
    return 2;
}
