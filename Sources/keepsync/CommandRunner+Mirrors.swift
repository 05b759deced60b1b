import KeepSyncCore
import KeepSyncLinux

extension CommandRunner {
    // MARK: several mirrors (SPEC "Several mirrors")

    /// `sync` of every mirror in turn; the exit code is the worst. With several, each
    /// mirror's log and error lines start with `mirror NAME:`, and one that fails or is
    /// refused does not stop the others.
    func syncEach(_ invocation: Invocation, style: LogSink.Style) throws -> ExitCode {
        let all = try resolver.eachMirror(invocation)
        if all.count == 1 { return try sync(all[0], style: style) }
        return all.reduce(ExitCode.success) { worst, settings in
            do {
                return worst.worst(try sync(settings, style: style, label: settings.mirrorLabel))
            } catch {
                fail(error, style: style, mirror: settings.mirrorLabel)
                return worst.worst(ExitCode(failure: error))
            }
        }
    }

    /// `check` of every mirror in turn; the exit code is the worst. With several, a line
    /// `mirror NAME:` comes before each mirror's differences and summary.
    func checkEach(_ invocation: Invocation, style: LogSink.Style) throws -> ExitCode {
        let all = try resolver.eachMirror(invocation)
        if all.count == 1 { return try check(all[0]) }
        return all.reduce(ExitCode.success) { worst, settings in
            LogSink.writeOut("mirror \(settings.mirrorLabel):\n")
            do {
                return worst.worst(try check(settings))
            } catch {
                fail(error, style: style, mirror: settings.mirrorLabel)
                return worst.worst(ExitCode(failure: error))
            }
        }
    }

    /// `status` of several mirrors: one block each (`mirror NAME:` and the status), or
    /// with `--json` an array; a mirror without a status file yet is said to have none.
    /// Exit 1 only when none has one.
    func printStatuses(_ all: [Settings], json: Bool) throws -> ExitCode {
        let entries = all.map { (settings: $0, status: try? HostPaths.read(StatusList.file(in: $0.state))) }
        guard entries.contains(where: { $0.status != nil }) else {
            throw KeepSyncError(.io, "no status file for any of \(all.count) mirrors (\(all.map(\.mirrorLabel).joined(separator: ", "))); "
                                + "has keepsync run or sync been started?")
        }
        if json {
            LogSink.writeOut(StatusList.json(entries))
        } else {
            LogSink.writeOut(entries.map { settings, status in
                "mirror \(settings.mirrorLabel):\n" + (status.map { StatusText.render(json: $0) } ?? "  \(StatusList.missing(in: settings.state))\n")
            }.joined(separator: "\n"))
        }
        return .success
    }
}
