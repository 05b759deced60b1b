/// A group of files whose data a mirror holds (`MirrorProviding.beginInstall`) but has
/// not put in place yet. Call `commit`, then `finish`, once each; a group never
/// finished leaves only leftovers the next sweep removes (a local group let go of before
/// its renames discards its temp files instead).
public protocol PendingInstall: AnyObject {
    /// Starts making the group's bytes durable; may return before they are (the barrier
    /// runs beside the caller's next work; a local group's started at `beginInstall`).
    func commit()
    /// Waits for the barrier, then puts each file whose source is still the version
    /// copied in place (one that changed is copied again on its own). Results are in the
    /// order of the paths begun; a failed barrier fails every file and installs none.
    func finish() -> [(path: RelativePath, result: Result<CopyResult?, any Error>)]
}
