/* layersync_client_options.durability (docs/durability.md): layersync_client_options_init sets
 * LAYERSYNC_DURABILITY_FULL; a value outside layersync_durability_t makes
 * layersync_client_create fail with INVALID_ARGUMENT; a client with LAYERSYNC_DURABILITY_NORMAL
 * creates, updates and deletes annotations that reach a second client through the real server;
 * and a NORMAL write survives a kill -9 of its process right after the call returned (a child
 * process, this executable re-run with --child, creates an annotation, acknowledges it on a
 * pipe and is SIGKILLed; the parent then finds the record in the store, still queued, and
 * syncs it to the server). A power loss is not simulated here: see
 * Tests/LayerSyncCoreTests/DurabilityTests.swift. */
#include "ls_test.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define DOCUMENT_ID "doc-durability"

extern char **environ;

static layersync_client *client_create(const char *url, const char *storage, int32_t durability, ls_events *events)
{
    layersync_client_options options = ls_client_options(url, storage);
    options.durability = durability;
    return ls_client_create_with(&options, events);
}

static void check_options(void)
{
    layersync_client_options options;
    memset(&options, 0xAB, sizeof options);
    CHECK_OK(layersync_client_options_init(&options, LAYERSYNC_CLIENT_OPTIONS_VERSION), NULL);
    CHECK_MSG(options.durability == LAYERSYNC_DURABILITY_FULL, "options_init set durability %d", options.durability);

    const int32_t invalid[] = {2, -1, 0x7fffffff};
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        options = ls_client_options(ls_closed_port_url(), ls_temp_dir("durability-invalid"));
        options.durability = invalid[i];
        layersync_client *client = (layersync_client *)&options; /* must be reset to NULL */
        layersync_error error = LAYERSYNC_ERROR_INIT;
        int rc = layersync_client_create(&options, NULL, &client, &error);
        CHECK_MSG(rc == LAYERSYNC_ERROR_INVALID_ARGUMENT && error.code == rc, "durability %d: rc %d (%s)", invalid[i], rc,
                  layersync_error_code_name(rc));
        CHECK(client == NULL);
        CHECK_MSG(error.message && strstr(error.message, "options.durability"), "message: %s",
                  error.message ? error.message : "(none)");
        layersync_error_clear(&error);
    }
}

static char *create_note(layersync_document *document, const char *note)
{
    char json[256], *out = NULL;
    snprintf(json, sizeof json, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0,\"note\":\"%s\"}", note);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_create_annotation(document, json, &out, &error), &error);
    json_t *created = LS_JSON(out, "create_annotation");
    char *id = strdup(json_string_value(json_object_get(created, "id")));
    json_decref(created);
    layersync_free(out);
    return id;
}

/* The note of annotation `id` in `document`, or NULL if it has none (caller frees). */
static char *note_of(layersync_document *document, const char *id)
{
    char *out = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    int rc = layersync_document_get_annotation(document, id, &out, &error);
    layersync_error_clear(&error);
    if (rc != LAYERSYNC_OK) return NULL;
    json_t *json = LS_JSON(out, "get_annotation");
    const char *note = json_string_value(json_object_get(json, "note"));
    char *copy = note ? strdup(note) : NULL;
    json_decref(json);
    layersync_free(out);
    return copy;
}

static void check_note(layersync_document *document, const char *id, const char *expected, const char *what)
{
    char *note = note_of(document, id);
    CHECK_MSG(expected ? note && strcmp(note, expected) == 0 : note == NULL, "%s: annotation %s has note %s, expected %s",
              what, id, note ? note : "(none)", expected ? expected : "(none)");
    free(note);
}

/* NORMAL on one client, FULL (the default) on the other: edits go both ways. */
static void check_sync(const ls_server *server, const char *jwt)
{
    ls_events a_events, b_events;
    ls_events_init(&a_events);
    ls_events_init(&b_events);
    layersync_client *a = client_create(server->url, ls_temp_dir("durability-a"), LAYERSYNC_DURABILITY_NORMAL, &a_events);
    layersync_client *b = client_create(server->url, ls_temp_dir("durability-b"), LAYERSYNC_DURABILITY_FULL, &b_events);
    layersync_document *a_document = ls_document(a, jwt);
    layersync_document *b_document = ls_document(b, jwt);
    ls_download(a_document, &a_events);
    ls_download(b_document, &b_events);

    char *id = create_note(a_document, "normal-1");
    CHECK(layersync_document_has_unsynced_changes(a_document));
    ls_sync(a_document, &a_events);
    CHECK(!layersync_document_has_unsynced_changes(a_document));
    ls_sync(b_document, &b_events);
    check_note(b_document, id, "normal-1", "B after A's create");

    char json[256], *out = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    snprintf(json, sizeof json, "{\"id\":\"%s\",\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0,\"note\":\"full-2\"}", id);
    CHECK_OK(layersync_document_update_annotation(b_document, json, &out, &error), &error);
    layersync_free(out);
    ls_sync(b_document, &b_events);
    ls_sync(a_document, &a_events);
    check_note(a_document, id, "full-2", "A after B's update");

    CHECK_OK(layersync_document_delete_annotation(a_document, id, &error), &error);
    ls_sync(a_document, &a_events);
    ls_sync(b_document, &b_events);
    check_note(b_document, id, NULL, "B after A's delete");
    free(id);

    ls_client_destroy(a, &a_events);
    ls_client_destroy(b, &b_events);
    ls_events_free(&a_events);
    ls_events_free(&b_events);
}

/* ---- kill -9 right after a NORMAL create ---------------------------------------------------- */

static int child_main(const char *url, const char *storage, const char *jwt)
{
    const int ack = 3;
    layersync_client_options options = ls_client_options(url, storage); /* automatic sync off */
    options.durability = LAYERSYNC_DURABILITY_NORMAL;
    layersync_client *client = NULL;
    layersync_document *document = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    if (layersync_client_create(&options, NULL, &client, &error) != LAYERSYNC_OK) return 10;
    if (layersync_client_document_for_jwt(client, jwt, &document, &error) != LAYERSYNC_OK) return 11;
    if (layersync_document_download(document, &error) != LAYERSYNC_OK) return 12;
    for (int waited = 0; !layersync_document_is_downloaded(document); waited++) {
        if (waited > 6000) return 13;
        usleep(10000);
    }
    char *out = NULL;
    const char *json = "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0,\"note\":\"before-kill\"}";
    if (layersync_document_create_annotation(document, json, &out, &error) != LAYERSYNC_OK) return 14;
    json_t *created = json_loads(out, 0, NULL);
    /* Acknowledged only after the call returned; the parent kills at once. */
    dprintf(ack, "%s\n", json_string_value(json_object_get(created, "id")));
    for (;;) pause();
}

static void check_kill9(const ls_server *server, const char *jwt, const char *self_path)
{
    const char *storage = ls_temp_dir("durability-kill9");
    int fds[2];
    CHECK(pipe2(fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 3);
    char *child_argv[] = {(char *)self_path, "--child", (char *)server->url, (char *)storage, (char *)jwt, NULL};
    /* argv[0] (CTest gives an absolute path): under valgrind /proc/self/exe is valgrind's tool. */
    const char *self = strchr(self_path, '/') ? self_path : "/proc/self/exe";
    pid_t child;
    CHECK(posix_spawn(&child, self, &actions, NULL, child_argv, environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    char id[128] = "";
    size_t used = 0;
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    while (strchr(id, '\n') == NULL && used < sizeof id - 1 && poll(&p, 1, LS_DOWNLOAD_TIMEOUT_MS) > 0) {
        ssize_t n = read(fds[0], id + used, sizeof id - 1 - used);
        if (n <= 0) break;
        used += (size_t)n;
        id[used] = '\0';
    }
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    close(fds[0]);
    CHECK_MSG(strchr(id, '\n') != NULL, "the child acknowledged no create (status %d)", status);
    CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child exited on its own (status %d)", status);
    *strchr(id, '\n') = '\0';

    /* The record is in the store, still queued; a NORMAL client sends it. */
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = client_create(server->url, storage, LAYERSYNC_DURABILITY_NORMAL, &events);
    layersync_document *document = ls_document(client, jwt);
    CHECK(layersync_document_is_downloaded(document));
    check_note(document, id, "before-kill", "after kill -9");
    CHECK(layersync_document_has_unsynced_changes(document));
    ls_sync(document, &events);
    CHECK(!layersync_document_has_unsynced_changes(document));
    ls_client_destroy(client, &events);
    ls_events_free(&events);

    ls_events fresh_events;
    ls_events_init(&fresh_events);
    layersync_client *fresh = NULL;
    layersync_document *remote = ls_open_downloaded(server, DOCUMENT_ID, NULL, "alice", &fresh_events, &fresh, NULL);
    check_note(remote, id, "before-kill", "on the server after kill -9");
    ls_client_destroy(fresh, &fresh_events);
    ls_events_free(&fresh_events);
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--child") == 0) return child_main(argv[2], argv[3], argv[4]);
    check_options();
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), DOCUMENT_ID);
    char *jwt = ls_server_mint_token(&server, DOCUMENT_ID, NULL, "alice", 0);
    check_sync(&server, jwt);
    check_kill9(&server, jwt, argv[0]);
    free(jwt);
    ls_server_stop(&server);
    return ls_pass("durability_option");
}
