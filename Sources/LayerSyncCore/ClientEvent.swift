import LayerSyncModel

/// Everything a ``SyncClient`` reports, delivered in order on the client's one serial
/// event queue (see ``SyncClient/init(configuration:eventHandler:)``).
///
/// The cases mirror Instant's `InstantClientDelegate` plus LayerSync's additions.
public enum ClientEvent: Sendable {
    /// Result of the connection sequence (`GET /sync/v1/info`), reported once per client.
    case serverDidValidate(Result<ServerInfo, LayerSyncError>)
    /// Bytes of the PDF downloaded so far; `bytesTotal` is -1 when unknown.
    case downloadProgress(DocumentDescriptor, bytesDone: Int64, bytesTotal: Int64)
    /// The PDF and the layer snapshot are stored locally.
    case didFinishDownload(DocumentDescriptor)
    /// The download failed or was cancelled (`.cancelled`).
    case didFailDownload(DocumentDescriptor, LayerSyncError)
    /// A sync cycle started.
    case didBeginSync(DocumentDescriptor)
    /// The document's state changed; reported once per transition.
    case didChangeSyncState(DocumentDescriptor, DocumentState)
    /// A sync cycle ended with nothing left to send.
    case didFinishSync(DocumentDescriptor)
    /// A sync cycle failed; pending changes are kept.
    case didFailSync(DocumentDescriptor, LayerSyncError)
    /// Server changes were applied to the local store.
    case didReceiveChanges(DocumentDescriptor, RecordChanges)
    /// Local changes lost against the server; the server versions were adopted.
    case didRejectChanges(DocumentDescriptor, [RejectedChange])
    /// The server rejected the document's JWT (reported once per token).
    case didFailAuthentication(DocumentDescriptor, LayerSyncError)
    /// A new JWT was accepted by the server.
    case didFinishReauthentication(DocumentDescriptor, jwt: String)
    /// A new JWT was rejected or could not be verified.
    case didFailReauthentication(DocumentDescriptor, LayerSyncError)
    /// The server's layer epoch changed (layer restored or recreated): the local store was
    /// re-based onto the new snapshot. The error has code `.serverReset`; its message names
    /// the epochs and how many unsynced local changes were kept and will be re-sent (none is
    /// ever dropped). Records the new snapshot changed arrive as `didReceiveChanges`.
    case didResetLayer(DocumentDescriptor, LayerSyncError)
    /// The engine needs a fresh JWT for the document; answer with `reauthenticate(jwt:)`.
    case requestToken(DocumentDescriptor)
}
