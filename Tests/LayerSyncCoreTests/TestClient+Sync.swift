import Foundation
import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel

/// Download, sync and rejection helpers of a ``TestClient`` that wait on its recorded events
/// (suites written before these keep copies as methods of their own).
extension TestClient {
    /// Gets the document for `jwt` and downloads it.
    /// - Throws: The download's error.
    func downloaded(jwt: String) throws -> DocumentDescriptor {
        let document = try client.document(forJWT: jwt)
        try document.download()
        let result = try #require(events.waitForDownload(document))
        if let error = result { throw error }
        return document
    }

    /// Runs one sync cycle and returns its error (`nil` = finished).
    func sync(_ document: DocumentDescriptor) throws -> LayerSyncError? {
        let start = events.count
        try document.sync()
        return try #require(events.waitForSyncEnd(document, after: start), "sync did not end")
    }

    /// Every change reported rejected in events recorded at index `start` or later.
    func rejections(after start: Int = 0) -> [RejectedChange] {
        events.all[start...].flatMap { event -> [RejectedChange] in
            if case .didRejectChanges(_, let list) = event { return list }
            return []
        }
    }
}
