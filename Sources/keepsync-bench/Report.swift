/// Samples of one tool on one measure, and the table they make.
struct Samples {
    var values: [Double] = []
    var failures: [String] = []

    var median: Double? {
        guard !values.isEmpty else { return nil }
        let s = values.sorted()
        return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
    }

    /// The sample at quantile `p` (0-1, nearest rank), failures kept.
    func percentile(_ p: Double) -> Samples {
        guard !values.isEmpty else { return Samples(values: [], failures: failures) }
        let sorted = values.sorted()
        let index = min(sorted.count - 1, Int((p * Double(sorted.count)).rounded(.up)) - 1)
        return Samples(values: [sorted[max(0, index)]], failures: failures)
    }

    func cell(_ unit: Unit) -> String {
        if !failures.isEmpty { return "FAILED" }
        guard let m = median, let lo = values.min(), let hi = values.max() else { return "-" }
        if values.count == 1 { return unit.format(m) }
        return "\(unit.format(m)) [\(unit.format(lo, bare: true))-\(unit.format(hi, bare: true))]"
    }
}

/// How a number prints.
enum Unit {
    case seconds, milliseconds, mebibytes, count, percent

    func format(_ v: Double, bare: Bool = false) -> String {
        switch self {
        case .seconds: return fixed(v, v < 10 ? 2 : 1) + (bare ? "" : " s")
        case .milliseconds: return fixed(v * 1000, v < 0.01 ? 2 : 1) + (bare ? "" : " ms")
        case .mebibytes: return fixed(v, 1) + (bare ? "" : " MiB")
        case .count: return String(Int(v))
        case .percent: return fixed(v, v < 10 ? 2 : 1) + (bare ? "" : " %")
        }
    }

    func fixed(_ v: Double, _ digits: Int) -> String {
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let r = (v * scale).rounded() / scale
        var text = String(r)
        if let dot = text.firstIndex(of: ".") {
            let decimals = text.distance(from: dot, to: text.endIndex) - 1
            if decimals < digits { text += String(repeating: "0", count: digits - decimals) }
        } else if digits > 0 {
            text += "." + String(repeating: "0", count: digits)
        }
        return text
    }
}

/// One row of the table: a measure, each tool's samples, the ratio against the anchors
/// and the target it is held to.
struct Row {
    var measure: String
    var unit: Unit
    var tools: [(name: String, samples: Samples)]
    /// (anchor tool, highest allowed ratio keepsync/anchor); nil ratio: shown, not a target.
    var targets: [(anchor: String, limit: Double?)] = []
    /// Absolute limits on keepsync's median, in the row's unit (seconds or MiB).
    var absolute: Double?
    var note = ""
    /// Shown, never judged (the issue sets no target for it): its mark is "-".
    var informational = false

    func samples(_ name: String) -> Samples? { tools.first { $0.name == name }?.samples }

    /// The ratio texts and whether every target holds (nil: could not be judged).
    func verdict() -> (text: String, met: Bool?) {
        guard let k = samples("keepsync") else { return ("", nil) }
        if !k.failures.isEmpty { return ("keepsync failed", false) }
        guard let km = k.median else { return ("", nil) }
        var parts: [String] = []
        var met: Bool? = true
        for t in targets {
            guard let a = samples(t.anchor), a.failures.isEmpty, let am = a.median, am > 0 else {
                parts.append("vs \(t.anchor): -")
                if t.limit != nil { met = nil }
                continue
            }
            let ratio = km / am
            let limit = t.limit.map { " (target <= \(Unit.count.fixed($0, 1))x)" } ?? ""
            parts.append("\(Unit.count.fixed(ratio, 2))x \(t.anchor)\(limit)")
            if let l = t.limit, ratio > l { met = false }
        }
        if let absolute {
            parts.append("target <= \(unit.format(absolute))")
            if km > absolute { met = false }
        }
        return (parts.joined(separator: ", "), met)
    }
}

/// Prints rows as an aligned table.
enum Table {
    static func render(_ rows: [Row]) -> [String] {
        let tools = ["keepsync", "cp -a", "rsync -a", "lsyncd"]
        var lines: [[String]] = [["measure"] + tools + ["ratio of medians", "target"]]
        for row in rows {
            let (text, met) = row.verdict()
            let mark = met == nil || row.informational ? "-" : (met! ? "met" : "MISSED")
            lines.append([row.measure] + tools.map { row.samples($0)?.cell(row.unit) ?? "" } + [text, mark])
        }
        var widths = [Int](repeating: 0, count: lines[0].count)
        for l in lines { for (i, c) in l.enumerated() { widths[i] = max(widths[i], c.count) } }
        return lines.map { l in
            l.enumerated().map { i, c in i == l.count - 1 ? c : c + String(repeating: " ", count: widths[i] - c.count) }
                .joined(separator: "  ")
        }
    }
}
