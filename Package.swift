// swift-tools-version:6.2
// The only compile definition of LayerSync's Swift code (docs/architecture.md §1).
// CMakeLists.txt drives `swift build` with this file; it never compiles Swift itself.
//
// The engine is four targets whose dependencies point one way, so the compiler enforces the
// layering (docs/architecture.md §1):
//
//     LayerSync (C ABI) → LayerSyncCore → LayerSyncStore, LayerSyncTransport → LayerSyncModel
//
// Store and transport do not know each other: what they share (the wire messages, records,
// errors, ids) lives in the model. Declarations an upper target uses are `package`; `public`
// is only what the C ABI target needs, and internal stays internal.
import PackageDescription

let engine: [SwiftSetting] = [.swiftLanguageMode(.v6)]

let package = Package(
    name: "LayerSync",
    products: [
        // liblayersync.so: the C ABI declared by include/layersync.h.
        .library(name: "layersync", type: .dynamic, targets: ["LayerSync"]),
    ],
    targets: [
        // System libraries (Debian: libsqlite3-dev, libjansson-dev, libcurl4-openssl-dev).
        // Jansson is used by the C tests and C examples only (CMakeLists.txt).
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite"),
        .systemLibrary(name: "CJansson", path: "Sources/CJansson"),
        .systemLibrary(name: "CCurl", path: "Sources/CCurl"),
        // Exposes the generated public header include/layersync.h to Swift, so that
        // `@c @implementation` exports are checked against it by the compiler.
        .systemLibrary(name: "CLayerSync", path: "Sources/CLayerSync"),
        // Values every layer shares: JSON values and their limits, ids (ULID, SHA-256,
        // base64url), errors and codes, document states, server URLs, JWT claims, and the wire
        // messages (server records, layer pages, sync answers). No I/O.
        .target(name: "LayerSyncModel", swiftSettings: engine),
        // The local store: SQLite, the layer store and its change queue, the on-disk layout,
        // commit durability.
        .target(name: "LayerSyncStore", dependencies: ["LayerSyncModel", "CSQLite"], swiftSettings: engine),
        // The network: HTTP over libcurl, the sync server's endpoints, cancellation, the
        // network-availability flags.
        .target(name: "LayerSyncTransport", dependencies: ["LayerSyncModel", "CCurl"], swiftSettings: engine),
        // The engine's public API: client, document descriptor, sync cycle, listening,
        // authentication, events. No C-ABI concerns.
        .target(
            name: "LayerSyncCore",
            dependencies: ["LayerSyncModel", "LayerSyncStore", "LayerSyncTransport"],
            swiftSettings: engine
        ),
        // The C ABI: thin exports, handle and callback plumbing, error translation.
        .target(
            name: "LayerSync",
            dependencies: ["LayerSyncCore", "LayerSyncModel", "LayerSyncStore", "CLayerSync"],
            swiftSettings: engine,
            // SONAME liblayersync.so.<major of api/layersync.toml's version>; the CTest
            // check `abi.soname` fails if the two drift apart.
            // -static-stdlib: the Swift runtime, Dispatch and Synchronization are linked in
            // (their symbols hidden by the driver's --exclude-libs ALL), so the installed
            // library needs no Swift toolchain: NEEDED is libsqlite3, libcurl, libstdc++,
            // libgcc_s, libm, libc only. The CTest check `abi.self_contained` keeps it so.
            linkerSettings: [.unsafeFlags(["-Xlinker", "-soname=liblayersync.so.0", "-static-stdlib"])]
        ),
        .testTarget(
            name: "LayerSyncCoreTests",
            dependencies: ["LayerSyncCore", "LayerSyncModel", "LayerSyncStore", "LayerSyncTransport"]
        ),
    ]
)
