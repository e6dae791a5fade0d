import CLayerSync
import LayerSyncCore
import LayerSyncModel

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// Library-wide functions of include/layersync.h ("Library" section).

/// "MAJOR.MINOR.PATCH", built from the header's version macros (api/layersync.toml).
private let versionCString = OwnedCString(
    "\(LAYERSYNC_VERSION_MAJOR).\(LAYERSYNC_VERSION_MINOR).\(LAYERSYNC_VERSION_PATCH)")

/// Static C strings for `layersync_error_code_name`, one per known code.
private let errorCodeNames: [Int32: OwnedCString] = {
    var names: [Int32: OwnedCString] = [0: OwnedCString("OK")]
    for (code, name) in ErrorCode.allNamed { names[code.rawValue] = OwnedCString(name) }
    return names
}()
private let unrecognizedName = OwnedCString("UNRECOGNIZED")

@c @implementation public func layersync_version() -> UnsafePointer<CChar>? {
    versionCString.cString
}

@c @implementation public func layersync_abi_version() -> Int32 {
    Int32(LAYERSYNC_ABI_VERSION)
}

@c @implementation public func layersync_free(_ pointer: UnsafeMutableRawPointer?) {
    free(pointer)
}

@c @implementation public func layersync_error_clear(_ error: UnsafeMutablePointer<layersync_error>?) {
    guard let error else { return }
    ErrorBridge.clear(error)
}

@c @implementation public func layersync_error_code_name(_ code: Int32) -> UnsafePointer<CChar>? {
    (errorCodeNames[code] ?? unrecognizedName).cString
}
