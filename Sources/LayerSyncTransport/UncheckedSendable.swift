/// The engine's only unchecked sendability: C pointers (curl handles, sqlite3
/// connections, file descriptors' owners) that are used under a lock or from one
/// thread at a time, as the comments at each use explain.
package struct UncheckedSendable<Value>: @unchecked Sendable {
    /// The wrapped value.
    package var value: Value

    /// Wraps a value.
    /// - Parameter value: The value to carry across concurrency domains.
    package init(_ value: Value) { self.value = value }
}
