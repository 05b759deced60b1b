import KeepSyncCore

/// Runs a helper program (systemctl) to completion: stdout discarded, stderr returned.
enum Subprocess {
    /// Exit status (128 + signal when killed) and what it wrote to stderr.
    static func run(_ argv: [String]) throws -> (status: Int32, stderr: String) {
        let pipe: (read: FileDescriptor, write: FileDescriptor)
        do throws(Errno) { pipe = try Sys.pipe() } catch { throw KeepSyncError(.io, "cannot run \(argv[0]): pipe: \(error.text)") }
        let pid: Int32
        do throws(Errno) { pid = try Sys.spawn(argv, stderr: pipe.write) } catch {
            pipe.write.close()
            pipe.read.close()
            throw KeepSyncError(.io, "cannot run \(argv[0]): \(error.text)")
        }
        pipe.write.close()
        let output = (try? pipe.read.readAll()) ?? []
        pipe.read.close()
        let status: Int32
        do throws(Errno) { status = try Sys.waitForExit(pid) } catch {
            throw KeepSyncError(.io, "cannot run \(argv[0]): waitpid: \(error.text)")
        }
        return (status, String(decoding: output, as: UTF8.self))
    }
}
