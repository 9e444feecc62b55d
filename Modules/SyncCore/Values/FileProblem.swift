import Foundation

/// A file system failure in a few words, for messages: "no such file or directory", "permission
/// denied", not Foundation's dump of an error's domain, code and user info.
///
/// ```swift
/// do { _ = try Data(contentsOf: url) } catch { print("cannot read \(url.path): \(FileProblem.reason(error))") }
/// ```
public enum FileProblem: Sendable {
    /// The reason `error` gives, in words.
    public static func reason(_ error: any Error) -> String {
        let failure = error as NSError
        switch (failure.domain, failure.code) {
        case (NSCocoaErrorDomain, NSFileReadNoSuchFileError), (NSCocoaErrorDomain, NSFileNoSuchFileError),
            (NSPOSIXErrorDomain, Int(ENOENT)):
            return "no such file or directory"
        case (NSCocoaErrorDomain, NSFileReadNoPermissionError), (NSCocoaErrorDomain, NSFileWriteNoPermissionError),
            (NSPOSIXErrorDomain, Int(EACCES)):
            return "permission denied"
        case (NSCocoaErrorDomain, NSFileWriteOutOfSpaceError), (NSPOSIXErrorDomain, Int(ENOSPC)):
            return "no space left on the device"
        case (NSCocoaErrorDomain, NSFileWriteVolumeReadOnlyError), (NSPOSIXErrorDomain, Int(EROFS)):
            return "the volume is read-only"
        case (NSCocoaErrorDomain, NSFileWriteFileExistsError), (NSPOSIXErrorDomain, Int(EEXIST)):
            return "a file is in the way"
        case (NSCocoaErrorDomain, _):
            return "the file system refused (code \(failure.code))"
        default:
            return failure.localizedDescription
        }
    }
}
