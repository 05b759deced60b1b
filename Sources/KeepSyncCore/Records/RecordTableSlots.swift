extension RecordTable {
    /// The table's slots in pages of 256 (16 KiB): they grow a page at a time and never
    /// move. (Slots grown by doubling held up to three times their size while they moved,
    /// and room for twice their count after.)
    struct Slots: RandomAccessCollection, Sendable {
        static let pageSize = 256
        private var pages: [[Slot]] = []
        /// Slots held.
        private(set) var count = 0

        var startIndex: Int { 0 }
        var endIndex: Int { count }
        var indices: Range<Int> { 0..<count }

        subscript(i: Int) -> Slot {
            get { pages[i / Self.pageSize][i % Self.pageSize] }
            set { pages[i / Self.pageSize][i % Self.pageSize] = newValue }
        }

        /// Adds `slot` at the end.
        mutating func append(_ slot: Slot) {
            if count == pages.count * Self.pageSize {
                var page: [Slot] = []
                page.reserveCapacity(Self.pageSize)
                pages.append(page)
            }
            pages[pages.count - 1].append(slot)
            count += 1
        }

        /// Room for `n` slots in the list of pages (the pages come as they fill).
        mutating func reserveCapacity(_ n: Int) {
            pages.reserveCapacity((n + Self.pageSize - 1) / Self.pageSize)
        }

        /// Slots the pages made so far hold.
        var capacity: Int { pages.count * Self.pageSize }
    }
}
