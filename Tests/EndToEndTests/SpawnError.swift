/// The child could not be started.
struct SpawnError: Error, CustomStringConvertible {
    var description: String
}
