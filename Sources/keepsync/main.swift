import Foundation
import Glibc
import KeepSyncLinux

// Arguments as raw bytes: argv is not necessarily UTF-8.
var arguments: [[UInt8]] = []
for i in 1..<Int(CommandLine.argc) {
    if let p = CommandLine.unsafeArgv[i] {
        arguments.append(Array(UnsafeRawBufferPointer(start: p, count: strlen(p))))
    }
}
let code = CommandRunner(arguments: arguments, environment: ProcessInfo.processInfo.environment).run()
exit(code.rawValue)
