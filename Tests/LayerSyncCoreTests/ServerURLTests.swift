import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel

@Suite struct ServerURLTests {
    @Test(arguments: ["http://127.0.0.1:8787", "http://localhost", "http://[::1]:9/", "http://127.5.6.7/sync", "https://example.com"])
    func acceptsSecureOrLoopbackURLs(_ text: String) throws {
        _ = try ServerURL(text, allowInsecureHTTP: false)
    }

    @Test(arguments: ["http://example.com", "ftp://127.0.0.1", "127.0.0.1:80", "http://", "http://a b", "https://h:99999",
                      "https://h/?q=1", "https://user@h"])
    func rejectsOtherURLs(_ text: String) {
        do {
            _ = try ServerURL(text, allowInsecureHTTP: false)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.code == .invalidURL)
        }
    }

    @Test func allowsInsecureHTTPWhenAskedAndNormalises() throws {
        let url = try ServerURL("HTTP://Example.com:8080/prefix//", allowInsecureHTTP: true)
        #expect(url.base == "http://example.com:8080/prefix")
        #expect(ServerURL.layerSegment("") == "~")
        #expect(ServerURL.encodeSegment("a b/ü") == "a%20b%2F%C3%BC")
    }

    @Test func clientCreationValidatesSynchronously() {
        do {
            _ = try SyncClient(configuration: ClientConfiguration(serverURL: "http://example.com", storagePath: "/tmp/x")) { _ in }
            Issue.record("insecure URL accepted")
        } catch {
            #expect(error.code == .invalidURL)
        }
        do {
            _ = try SyncClient(configuration: ClientConfiguration(serverURL: "http://127.0.0.1:1", storagePath: "/proc/layersync/nope")) { _ in }
            Issue.record("uncreatable storage accepted")
        } catch {
            #expect(error.code == .couldNotWriteToDisk)
        }
        // The timeouts and the long-poll wait must be positive (C: layersync_client_create's
        // INVALID_ARGUMENT), checked before anything else.
        for change in [{ (c: inout ClientConfiguration) in c.connectTimeout = 0 }, { $0.requestTimeout = -1 },
                       { $0.longPollWait = 0 }, { $0.connectTimeout = .nan }] {
            var configuration = ClientConfiguration(serverURL: "http://example.com", storagePath: "/proc/layersync/nope")
            change(&configuration)
            do {
                _ = try SyncClient(configuration: configuration) { _ in }
                Issue.record("a configuration with a timeout or wait that is not positive was accepted")
            } catch {
                #expect(error.code == .invalidArgument)
            }
        }
    }
}
