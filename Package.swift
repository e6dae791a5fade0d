// swift-tools-version:6.2
// The only compile definition of LayerSync's Swift code (ARCHITECTURE.md §1).
// CMakeLists.txt drives `swift build` with this file; it never compiles Swift itself.
import PackageDescription

let package = Package(
    name: "LayerSync",
    products: [
        // liblayersync.so: the C ABI declared by include/layersync.h.
        .library(name: "layersync", type: .dynamic, targets: ["LayerSync"]),
    ],
    targets: [
        // System libraries (Debian: libsqlite3-dev, libjansson-dev, libcurl4-openssl-dev).
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite"),
        .systemLibrary(name: "CJansson", path: "Sources/CJansson"),
        .systemLibrary(name: "CCurl", path: "Sources/CCurl"),
        // Exposes the generated public header include/layersync.h to Swift, so that
        // `@c @implementation` exports are checked against it by the compiler.
        .systemLibrary(name: "CLayerSync", path: "Sources/CLayerSync"),
        // The engine: model, store, transport, auth, sync. No C-ABI concerns.
        .target(
            name: "LayerSyncCore",
            dependencies: ["CSQLite", "CJansson", "CCurl"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The C ABI: thin exports, handle and callback plumbing, error translation.
        .target(
            name: "LayerSync",
            dependencies: ["LayerSyncCore", "CLayerSync"],
            swiftSettings: [.swiftLanguageMode(.v6)],
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
            dependencies: ["LayerSyncCore"]
        ),
    ]
)
