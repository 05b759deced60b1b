import Testing
@testable import KeepSyncCore

@Suite("ExitCode")
struct ExitCodeMappingTests {
    struct Other: Error {}

    @Test(arguments: [(KeepSyncError.Code.configuration, ExitCode.usage), (.unsafe, .unsafe), (.io, .failure),
                      (.notFound, .failure)])
    func aFailureMapsToItsExitCode(code: KeepSyncError.Code, exit: ExitCode) {
        #expect(ExitCode(failure: KeepSyncError(code, "x")) == exit)
    }

    @Test func anErrorOfAnotherKindIsAFailure() {
        #expect(ExitCode(failure: Other()) == .failure)
    }
}
