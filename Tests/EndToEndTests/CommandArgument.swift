/// Something that can be passed as one raw argv entry.
protocol CommandArgument: Sendable {
    var argumentBytes: [UInt8] { get }
}

extension String: CommandArgument {
    var argumentBytes: [UInt8] { Array(utf8) }
}

extension Array: CommandArgument where Element == UInt8 {
    var argumentBytes: [UInt8] { self }
}
