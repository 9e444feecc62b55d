import Foundation
import ServerStorageCore
import Testing

@testable import BlobStorageFiles

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// How the file system's failures reach the server: no room is `full` (507), anything else `io` (500).
@Suite("FileBlobStorage failures")
struct FileFailureTests {
    @Test func noRoomIsFullAndOtherFailuresAreIO() {
        for code in [ENOSPC, EDQUOT, EFBIG] {
            let error = FileIO.failure("writing", "/blobs/uploads/u1.data", code)
            #expect(error.code == .full, "errno \(code): \(error)")
            #expect(error.message == "writing /blobs/uploads/u1.data failed: \(String(cString: strerror(code)))")
        }
        for code in [EIO, EACCES, EROFS] {
            #expect(FileIO.failure("writing", "/blobs/x", code).code == .io, "errno \(code)")
        }
    }
}
