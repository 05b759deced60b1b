import Glibc

/// One AF_UNIX datagram, sent without blocking and without SIGPIPE.
enum DatagramSocket {
    /// Sends `payload` to `address` (a path, or `@name` for the abstract namespace);
    /// false when it could not be sent (errors are the caller's to ignore).
    @discardableResult
    static func send(_ payload: [UInt8], to address: [UInt8]) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard address.count < capacity else { return false }
        let abstract = address.first == 0x40
        var bytes = address
        if abstract { bytes[0] = 0 }   // "@name" → abstract namespace
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            raw.copyBytes(from: bytes)
            if !abstract { raw[bytes.count] = 0 }
        }
        // Abstract addresses have an exact length; path addresses include the NUL.
        let length = MemoryLayout<sa_family_t>.size + bytes.count + (abstract ? 0 : 1)
        let sent = payload.withUnsafeBytes { buf in
            withUnsafePointer(to: &addr) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                    sendto(fd, buf.baseAddress, buf.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT), sa, socklen_t(length))
                }
            }
        }
        return sent >= 0
    }
}
