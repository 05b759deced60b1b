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

    @Test("the worst of several mirrors' exit codes: 3 over 2 over 1 over 0")
    func worstOfSeveral() {
        let order: [ExitCode] = [.success, .failure, .usage, .unsafe]
        for (i, a) in order.enumerated() {
            for (j, b) in order.enumerated() { #expect(a.worst(b) == order[max(i, j)], "\(a) \(b)") }
        }
    }

    @Test func anErrorOfAnotherKindIsAFailure() {
        #expect(ExitCode(failure: Other()) == .failure)
    }
}
