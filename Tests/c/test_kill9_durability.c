/* docs/rules.md rule 1 under kill -9: a child process (this executable re-run with
 * --child) writes annotations through the C ABI with automatic sync every 20 ms and explicit
 * syncs in between, acknowledging each write on a pipe only after the API call returned. The
 * parent SIGKILLs it at a random moment, many times over the same storage directory. After
 * every kill: the store opens (the next child gets no STORAGE_LOCKED), `PRAGMA
 * integrity_check` is ok and every acknowledged write is in it with its last acknowledged
 * content. At the end the parent syncs the store and checks that the server holds every
 * acknowledged record exactly once (no write lost, no retry duplicated). While the first
 * child runs, this process opening the same layer gets STORAGE_LOCKED (rule 8).
 *
 * LAYERSYNC_KILL9_SEED reproduces a run; the seed is printed. */
#include "ls_test.h"

#include <fcntl.h>
#include <glob.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define DOCUMENT_ID "doc-kill9"
#define ITERATIONS 12
#define MAX_RECORDS 20000

extern char **environ;

/* ---- the child: writes until killed -------------------------------------------------------- */

static int child_main(const char *url, const char *storage, const char *jwt, int iteration)
{
    const int ack = 3;
    layersync_client_options options = ls_client_options(url, storage);
    options.sync_delay_s = 0.02;
    layersync_client_delegate delegate = LAYERSYNC_CLIENT_DELEGATE_INIT;
    layersync_client *client = NULL;
    layersync_document *document = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    if (layersync_client_create(&options, &delegate, &client, &error) != LAYERSYNC_OK) {
        fprintf(stderr, "child: client_create: %s\n", error.message);
        return 10;
    }
    if (layersync_client_document_for_jwt(client, jwt, &document, &error) != LAYERSYNC_OK) {
        /* STORAGE_LOCKED here would mean the killed process's lock outlived it. */
        fprintf(stderr, "child: document_for_jwt: %s (%s)\n", layersync_error_code_name(error.code), error.message);
        return 11;
    }
    if (!layersync_document_is_downloaded(document)) {
        if (layersync_document_download(document, &error) != LAYERSYNC_OK) return 12;
        for (int waited = 0; !layersync_document_is_downloaded(document); waited++) {
            if (waited > 6000) return 13;
            usleep(10000);
        }
    }
    if (dprintf(ack, "R\n") < 0) return 14;
    char last_id[128] = "";
    for (int n = 0;; n++) {
        char json[256], *out = NULL;
        if (n % 5 == 4 && last_id[0] != '\0') {
            snprintf(json, sizeof json, "{\"id\":\"%s\",\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0,\"note\":\"u-%d-%d\"}",
                     last_id, iteration, n);
            if (layersync_document_update_annotation(document, json, &out, &error) != LAYERSYNC_OK) {
                fprintf(stderr, "child: update: %s\n", error.message);
                return 15;
            }
            dprintf(ack, "U %s u-%d-%d\n", last_id, iteration, n);
        } else {
            snprintf(json, sizeof json, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0,\"note\":\"k-%d-%d\"}", iteration, n);
            if (layersync_document_create_annotation(document, json, &out, &error) != LAYERSYNC_OK) {
                fprintf(stderr, "child: create: %s\n", error.message);
                return 16;
            }
            json_t *created = json_loads(out, 0, NULL);
            snprintf(last_id, sizeof last_id, "%s", json_string_value(json_object_get(created, "id")));
            json_decref(created);
            dprintf(ack, "C %s k-%d-%d\n", last_id, iteration, n);
        }
        layersync_free(out);
        if (n % 11 == 10) layersync_document_sync(document, NULL);
        if (n > 3000) pause(); /* enough; wait for the kill */
    }
}

/* ---- the parent ---------------------------------------------------------------------------- */

typedef struct {
    char id[64];
    char note[32];
} acked_record;

static acked_record records[MAX_RECORDS];
static int record_count;

static void acknowledge(const char *line)
{
    char kind, id[64], note[32];
    if (sscanf(line, "%c %63s %31s", &kind, id, note) != 3) return;
    for (int i = record_count - 1; i >= 0; i--) {
        if (strcmp(records[i].id, id) == 0) {
            CHECK_MSG(kind == 'U', "record %s acknowledged as created twice", id);
            snprintf(records[i].note, sizeof records[i].note, "%s", note);
            return;
        }
    }
    CHECK_MSG(kind == 'C', "update of unknown record %s", id);
    CHECK(record_count < MAX_RECORDS);
    snprintf(records[record_count].id, sizeof records[record_count].id, "%s", id);
    snprintf(records[record_count].note, sizeof records[record_count].note, "%s", note);
    record_count++;
}

/* Reads ack lines until `deadline_ms` from now (or EOF); returns false on EOF. */
static bool read_acks(int fd, char *buffer, size_t *used, size_t size, int deadline_ms, bool stop_at_ready, bool *ready)
{
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long elapsed = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (deadline_ms >= 0 && elapsed >= deadline_ms) return true;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int timeout = deadline_ms < 0 ? 60000 : (int)(deadline_ms - elapsed);
        if (poll(&p, 1, timeout) <= 0) {
            if (deadline_ms < 0) return true;
            continue;
        }
        ssize_t n = read(fd, buffer + *used, size - *used - 1);
        if (n <= 0) return false;
        *used += (size_t)n;
        buffer[*used] = '\0';
        char *line = buffer, *newline;
        while ((newline = strchr(line, '\n')) != NULL) {
            *newline = '\0';
            if (strcmp(line, "R") == 0) {
                if (ready) *ready = true;
            } else {
                acknowledge(line);
            }
            line = newline + 1;
        }
        *used = strlen(line);
        memmove(buffer, line, *used + 1);
        if (stop_at_ready && ready && *ready) return true;
    }
}

static const char *store_path(const char *storage)
{
    static char path[2048];
    char pattern[1800];
    snprintf(pattern, sizeof pattern, "%s/*/%s/layers/~/layer.sqlite", storage, DOCUMENT_ID);
    glob_t found;
    CHECK_MSG(glob(pattern, 0, NULL, &found) == 0 && found.gl_pathc == 1, "no single layer store matches %s", pattern);
    snprintf(path, sizeof path, "%s", found.gl_pathv[0]);
    globfree(&found);
    return path;
}

static char *note_of(const char *content)
{
    json_t *json = json_loads(content, 0, NULL);
    const char *note = json_string_value(json_object_get(json, "note"));
    char *copy = note ? strdup(note) : NULL;
    json_decref(json);
    return copy;
}

/* "k-IT-N" / "u-IT-N" → IT * 1e6 + N: the order in which the children wrote them. */
static long note_order(const char *note)
{
    char kind;
    int iteration, n;
    if (sscanf(note, "%c-%d-%d", &kind, &iteration, &n) != 3) return -1;
    return (long)iteration * 1000000L + n;
}

/* integrity_check ok and every acknowledged write present with its last acknowledged note. */
static void check_store(const char *storage, int iteration)
{
    sqlite3 *db = NULL;
    CHECK_MSG(sqlite3_open_v2(store_path(storage), &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK, "cannot open the store");
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *statement = NULL;
    CHECK(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &statement, NULL) == SQLITE_OK);
    CHECK(sqlite3_step(statement) == SQLITE_ROW);
    const char *verdict = (const char *)sqlite3_column_text(statement, 0);
    CHECK_MSG(strcmp(verdict, "ok") == 0, "iteration %d: integrity_check: %s", iteration, verdict);
    sqlite3_finalize(statement);
    CHECK(sqlite3_prepare_v2(db, "SELECT content FROM records WHERE id = ?", -1, &statement, NULL) == SQLITE_OK);
    for (int i = 0; i < record_count; i++) {
        sqlite3_bind_text(statement, 1, records[i].id, -1, SQLITE_STATIC);
        CHECK_MSG(sqlite3_step(statement) == SQLITE_ROW, "iteration %d: acknowledged record %s (%s) lost", iteration,
                  records[i].id, records[i].note);
        char *note = note_of((const char *)sqlite3_column_text(statement, 0));
        /* The acknowledged note, or a later one whose write returned but whose ack the kill cut
         * off (that write is durable too, so it becomes the expected content). */
        CHECK_MSG(note && note_order(note) >= note_order(records[i].note),
                  "iteration %d: record %s has note %s, acknowledged %s", iteration, records[i].id,
                  note ? note : "(none)", records[i].note);
        snprintf(records[i].note, sizeof records[i].note, "%s", note);
        free(note);
        sqlite3_reset(statement);
    }
    sqlite3_finalize(statement);
    sqlite3_close(db);
}

static void sync_until_clean(layersync_document *document, ls_events *events)
{
    for (int attempt = 0; attempt < 10; attempt++) {
        int finished, failed;
        LS_GET(events, events->did_finish_sync, finished);
        LS_GET(events, events->did_fail_sync, failed);
        layersync_error error = LAYERSYNC_ERROR_INIT;
        CHECK_OK(layersync_document_sync(document, &error), &error);
        LS_WAIT(events, LS_TIMEOUT_MS, events->did_finish_sync > finished || events->did_fail_sync > failed);
        if (!layersync_document_has_unsynced_changes(document)) return;
    }
    CHECK_MSG(false, "changes still pending after 10 sync cycles");
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "--child") == 0) return child_main(argv[2], argv[3], argv[4], atoi(argv[5]));
    unsigned seed = getenv("LAYERSYNC_KILL9_SEED") ? (unsigned)strtoul(getenv("LAYERSYNC_KILL9_SEED"), NULL, 10)
                                                   : (unsigned)time(NULL) ^ (unsigned)getpid();
    printf("seed %u\n", seed);
    srand(seed);
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), DOCUMENT_ID);
    char *jwt = ls_server_mint_token(&server, DOCUMENT_ID, NULL, "alice", 0);
    const char *storage = ls_temp_dir("kill9");
    static char buffer[1 << 16];
    int total_killed_mid_write = 0;

    for (int iteration = 0; iteration < ITERATIONS; iteration++) {
        int fds[2];
        CHECK(pipe2(fds, O_CLOEXEC) == 0);
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, fds[1], 3);
        char number[16];
        snprintf(number, sizeof number, "%d", iteration);
        char *child_argv[] = {argv[0], "--child", server.url, (char *)storage, jwt, number, NULL};
        pid_t child;
        /* argv[0] (CTest gives an absolute path): under valgrind /proc/self/exe is valgrind's
         * tool binary, which refuses to be run directly. */
        const char *self = strchr(argv[0], '/') ? argv[0] : "/proc/self/exe";
        CHECK(posix_spawn(&child, self, &actions, NULL, child_argv, environ) == 0);
        posix_spawn_file_actions_destroy(&actions);
        close(fds[1]);
        size_t used = 0;
        bool ready = false;
        read_acks(fds[0], buffer, &used, sizeof buffer, 60000, true, &ready);
        CHECK_MSG(ready, "iteration %d: the child did not open the store", iteration);
        if (iteration == 0) {
            /* Rule 8: while the child owns the layer, this process gets STORAGE_LOCKED. */
            ls_events events;
            ls_events_init(&events);
            layersync_client *second = ls_client_create(server.url, storage, &events);
            layersync_document *locked = NULL;
            layersync_error error = LAYERSYNC_ERROR_INIT;
            CHECK_RC(LAYERSYNC_ERROR_STORAGE_LOCKED, layersync_client_document_for_jwt(second, jwt, &locked, &error), &error);
            CHECK(locked == NULL);
            layersync_error_clear(&error);
            ls_client_destroy(second, &events);
            ls_events_free(&events);
        }
        int before = record_count;
        read_acks(fds[0], buffer, &used, sizeof buffer, 30 + rand() % 400, false, NULL);
        kill(child, SIGKILL);
        int status = 0;
        waitpid(child, &status, 0);
        CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "iteration %d: the child exited on its own (status %d)",
                  iteration, status);
        read_acks(fds[0], buffer, &used, sizeof buffer, -1, false, NULL); /* until EOF */
        close(fds[0]);
        if (record_count > before) total_killed_mid_write++;
        check_store(storage, iteration);
    }
    CHECK_MSG(record_count > 50, "only %d writes acknowledged", record_count);
    CHECK_MSG(total_killed_mid_write >= ITERATIONS / 2, "most children were killed before writing");

    /* Sync what is left, then compare with the server through a fresh client. */
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = ls_client_create(server.url, storage, &events);
    layersync_document *document = ls_document(client, jwt);
    CHECK(layersync_document_is_downloaded(document));
    sync_until_clean(document, &events);
    ls_client_destroy(client, &events);
    ls_events_free(&events);

    ls_events fresh_events;
    ls_events_init(&fresh_events);
    layersync_client *fresh = NULL;
    layersync_document *remote = ls_open_downloaded(&server, DOCUMENT_ID, NULL, "alice", &fresh_events, &fresh, NULL);
    char *list = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_list_annotations(remote, NULL, &list, &error), &error);
    json_t *all = LS_JSON(list, "list_annotations");
    layersync_free(list);
    for (int i = 0; i < record_count; i++) {
        int matches = 0;
        size_t index;
        json_t *record;
        json_array_foreach(all, index, record)
        {
            if (strcmp(json_string_value(json_object_get(record, "id")), records[i].id) == 0) {
                matches++;
                const char *note = json_string_value(json_object_get(record, "note"));
                CHECK_MSG(note && strcmp(note, records[i].note) == 0, "server has %s for %s, acknowledged %s",
                          note ? note : "(none)", records[i].id, records[i].note);
            } else {
                const char *note = json_string_value(json_object_get(record, "note"));
                CHECK_MSG(!note || strcmp(note, records[i].note) != 0, "note %s is on two records", records[i].note);
            }
        }
        CHECK_MSG(matches == 1, "server holds record %s %d times", records[i].id, matches);
    }
    printf("%d acknowledged writes over %d kills, all on the server exactly once\n", record_count, ITERATIONS);
    json_decref(all);
    ls_client_destroy(fresh, &fresh_events);
    ls_events_free(&fresh_events);
    free(jwt);
    return ls_pass("kill9_durability");
}
