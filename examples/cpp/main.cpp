// A minimal C++17 program over liblayersync: RAII ownership of the client and of the
// strings the library hands out, errors turned into exceptions. No server needed: it
// checks the ABI, opens a client, gets the document a JWT names, and shows the error a
// call on a not-yet-downloaded document returns.
//
//   layersync-example-cpp STORAGE_DIR
#include <layersync.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

namespace {

struct Error : std::runtime_error {
    int code;
    Error(int c, const std::string &what) : std::runtime_error(what), code(c) {}
};

// Calls a layersync function that takes `layersync_error *` last; throws on failure.
template <typename F> void check(F &&call)
{
    layersync_error error = LAYERSYNC_ERROR_INIT;
    int rc = call(&error);
    if (rc != LAYERSYNC_OK) {
        std::string message = std::string(layersync_error_code_name(rc)) + ": " + (error.message ? error.message : "");
        layersync_error_clear(&error);
        throw Error(rc, message);
    }
}

struct ClientDeleter {
    void operator()(layersync_client *client) const { layersync_client_destroy(client, nullptr); }
};
using Client = std::unique_ptr<layersync_client, ClientDeleter>;
struct Freer {
    void operator()(char *p) const { layersync_free(p); }
};
using String = std::unique_ptr<char, Freer>;

} // namespace

int main(int argc, char **argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s STORAGE_DIR\n", argv[0]);
        return 2;
    }
    if (layersync_abi_version() != LAYERSYNC_ABI_VERSION) {
        std::fprintf(stderr, "ABI mismatch\n");
        return 1;
    }
    try {
        layersync_client_options options;
        check([&](layersync_error *) { return layersync_client_options_init(&options, LAYERSYNC_CLIENT_OPTIONS_VERSION); });
        options.server_url = "http://127.0.0.1:9";
        options.storage_path = argv[1];
        layersync_client *raw = nullptr;
        check([&](layersync_error *e) { return layersync_client_create(&options, nullptr, &raw, e); });
        Client client(raw);

        // {"document_id": "cpp-doc", "user_id": "cpp"}; the signature is only checked by the server.
        const char *jwt = "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9."
                          "eyJkb2N1bWVudF9pZCI6ImNwcC1kb2MiLCJ1c2VyX2lkIjoiY3BwIn0.c2ln";
        layersync_document *document = nullptr;
        check([&](layersync_error *e) { return layersync_client_document_for_jwt(client.get(), jwt, &document, e); });
        char *user = nullptr;
        check([&](layersync_error *e) { return layersync_document_user_id(document, &user, e); });
        String user_id(user);
        std::printf("layersync %s: document %s, user %s\n", layersync_version(), layersync_document_id(document),
                    user_id.get());
        try {
            char *out = nullptr;
            check([&](layersync_error *e) { return layersync_document_list_annotations(document, nullptr, &out, e); });
            String json(out);
            std::printf("unexpected: %s\n", json.get());
            return 1;
        } catch (const Error &e) {
            if (e.code != LAYERSYNC_ERROR_NOT_DOWNLOADED) throw;
            std::printf("list before download: %s\n", e.what());
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
