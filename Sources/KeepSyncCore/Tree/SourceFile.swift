/// An open source file: its stat at open time, reads, and a re-check.
public protocol SourceFile: AnyObject {
    /// The stat taken right after opening.
    var stat: FileStat { get }
    /// Reads up to `count` bytes; empty at end of file.
    func read(upTo count: Int) throws -> [UInt8]
    /// A fresh `fstat` of the open file.
    func currentStat() throws -> FileStat
    /// Closes the file; further calls fail.
    func close()
    /// Asks for the file's first bytes to be read in the background, ahead of `read`: a
    /// hint, without effect where nothing is read from a disk.
    func willRead()
}

extension SourceFile {
    /// Nothing to read ahead.
    public func willRead() {}
}
