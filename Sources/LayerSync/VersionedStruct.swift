import CLayerSync
import LayerSyncCore

/// Structs the host passes in carry a `version` that says which fields they have
/// (api/layersync.toml lists the fields of each version). A program built against an older
/// header passes a shorter struct with an older version, so the library touches only the
/// bytes of that version's fields: reading or writing the whole Swift struct would go past
/// the caller's memory.
enum VersionedStruct {
    /// The `version` field (the first field, a `uint32_t`), read alone.
    static func version<T>(of pointer: UnsafePointer<T>) -> UInt32 {
        UnsafeRawPointer(pointer).load(as: UInt32.self)
    }

    /// `base` with its first `byteCount` bytes copied from `source` (a struct of a version
    /// whose fields end at `byteCount`); the fields after it keep the values of `base`.
    static func read<T>(_ source: UnsafePointer<T>, byteCount: Int, over base: T) -> T {
        precondition(byteCount <= MemoryLayout<T>.size)
        var value = base
        withUnsafeMutableBytes(of: &value) { $0.baseAddress!.copyMemory(from: source, byteCount: byteCount) }
        return value
    }

    /// Writes the first `byteCount` bytes of `value` to `destination`, nothing after them.
    static func write<T>(_ value: T, byteCount: Int, to destination: UnsafeMutablePointer<T>) {
        precondition(byteCount <= MemoryLayout<T>.size)
        withUnsafeBytes(of: value) { UnsafeMutableRawPointer(destination).copyMemory(from: $0.baseAddress!, byteCount: byteCount) }
    }

    /// Where the fields of `layersync_client_options` of `version` end, or nil for a version
    /// this library does not know.
    static func clientOptionsByteCount(version: UInt32) -> Int? {
        typealias Options = layersync_client_options
        switch version {
        case 1: return end(of: \Options.long_poll_wait_s)
        case 2: return end(of: \Options.durability)
        default: return nil
        }
    }

    /// Where the fields of `layersync_client_delegate` of `version` end, or nil for a version
    /// this library does not know.
    static func clientDelegateByteCount(version: UInt32) -> Int? {
        typealias Delegate = layersync_client_delegate
        switch version {
        case 1: return end(of: \Delegate.is_network_available)
        case 2: return end(of: \Delegate.did_reset_layer)
        default: return nil
        }
    }

    private static func end<T, Field>(of field: KeyPath<T, Field>) -> Int {
        MemoryLayout<T>.offset(of: field)! + MemoryLayout<Field>.size
    }
}
