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
 *
 * Each mode prints one JSON object on stdout. Exit status 0 on success.
 */
#define _GNU_SOURCE
#include <layersync.h>
#include <sqlite3.h>

#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
             "\"text\": {\"format\": \"plain\", \"value\": \"bench note %d\"}, \"color\": \"#FFD700\", "
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

int main(int argc, char **argv) {
    if (argc >= 5 && strcmp(argv[1], "download") == 0) return mode_download(argv[2], argv[3], argv[4]);
    if (argc >= 6 && strcmp(argv[1], "create") == 0) return mode_create(argv[2], argv[3], argv[4], atoi(argv[5]));
    if (argc >= 4 && strcmp(argv[1], "raw") == 0) return mode_raw(argv[2], atoi(argv[3]));
    if (argc >= 7 && strcmp(argv[1], "latency") == 0)
        return mode_latency(argv[2], argv[3], argv[4], argv[5], atoi(argv[6]), argc >= 8 ? argv[7] : "full");
    fprintf(stderr, "usage: ls_bench download URL STORAGE JWT | create URL STORAGE JWT N | raw DB N | "
                    "latency URL STORAGE JWT_A JWT_B N [full|normal]\n");
    return 2;
}
