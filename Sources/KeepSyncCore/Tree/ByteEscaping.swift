/// Bytes shown in messages and output, one line each.
public enum ByteEscaping {
    /// A path or name, unambiguous: printable ASCII stays, every other byte and `\` become `\xHH`.
    public static func escape<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        let hex: [Character] = Array("0123456789abcdef")
        var out = ""
        out.reserveCapacity(bytes.count)
        for b in bytes {
            if b >= 0x20 && b < 0x7F && b != 0x5C {
                out.append(Character(Unicode.Scalar(b)))
            } else {
                out.append("\\x")
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 0xF)])
            }
        }
        return out
    }

    /// Text a person typed, for a one-line message: lossy UTF-8 (so it reads as typed),
    /// control characters as `\xHH`.
    public static func escapeControls<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        var out = ""
        for scalar in String(decoding: bytes, as: UTF8.self).unicodeScalars {
            if scalar.value < 0x20 || scalar.value == 0x7F {
                out += "\\x" + (scalar.value < 0x10 ? "0" : "") + String(scalar.value, radix: 16)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
