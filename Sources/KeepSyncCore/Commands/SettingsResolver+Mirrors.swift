extension SettingsResolver {
    /// One mirror to resolve: its configuration (file keys, before the flags) and the
    /// section it comes from, if any.
    struct MirrorChoice {
        var configuration: Configuration
        var section: MirrorSection?
    }

    /// Every mirror of the source, fully resolved, in flag order or file order (SPEC
    /// "Several mirrors"): each exactly as a single-mirror run of that pair resolves it,
    /// with the same default state directory, so records carry over both ways.
    ///
    /// The mirrors are the `--mirror` flags, which replace the file's (except that a flag
    /// naming a section, by NAME or by path, selects that section with its keys), else the
    /// file's `[mirror NAME]` sections, else its `mirror =`. Precedence: flag, section key,
    /// top-level key, default. Throws `.configuration` for `--state` with several mirrors,
    /// and for two mirrors that are the same directory, one inside the other (local), or
    /// that share a state directory, naming both.
    public func eachMirror(_ invocation: Invocation) throws -> [Settings] {
        let (file, configPath) = try configurationFile(invocation)
        let fileName = configPath.map(Self.display) ?? ""
        var top = file
        top.sections = []
        let choices: [MirrorChoice]
        if !invocation.mirrors.isEmpty {
            choices = invocation.mirrors.map { flag in
                if let section = section(matching: flag, in: file.sections) {
                    return MirrorChoice(configuration: section.applied(to: top), section: section)
                }
                var config = top
                config.mirror = ConfigFileParser.expandingHome(flag, home: home)
                return MirrorChoice(configuration: config, section: nil)
            }
        } else if !file.sections.isEmpty {
            choices = file.sections.map { MirrorChoice(configuration: $0.applied(to: top), section: $0) }
        } else {
            choices = [MirrorChoice(configuration: top, section: nil)]
        }
        if let state = invocation.state, choices.count > 1 {
            throw KeepSyncError(.configuration, "--state \(Self.display(state)) takes one mirror, not \(choices.count) "
                                + "(\(choices.map { $0.section?.name ?? Self.display($0.configuration.mirror ?? []) }.joined(separator: ", "))): name one with --mirror NAME")
        }
        var flags = invocation
        flags.mirrors = []
        var all: [Settings] = []
        for choice in choices {
            let config = CommandLineParser.merge(file: choice.configuration, invocation: flags, home: home)
            do {
                var settings = try resolve(config, invocation: invocation, configPath: configPath)
                settings.mirrorLabel = choice.section?.name ?? settings.mirrorName
                all.append(settings)
            } catch let error as KeepSyncError where error.code == .configuration {
                guard let section = choice.section else { throw error }
                throw KeepSyncError(.configuration, "\(fileName):\(section.line): [mirror \(section.name)]: \(error.message)")
            }
        }
        try checkApart(all, sections: choices.map(\.section), fileName: fileName)
        return all
    }

    /// The section `flag` names, by NAME or by the mirror it holds.
    func section(matching flag: [UInt8], in sections: [MirrorSection]) -> MirrorSection? {
        if let named = sections.first(where: { Array($0.name.utf8) == flag }) { return named }
        let target = place(ConfigFileParser.expandingHome(flag, home: home))
        return sections.first { place($0.path) == target }
    }

    /// A mirror as compared: `HOST:DIR` normalized, a local path resolved.
    private func place(_ raw: [UInt8]) -> [UInt8] {
        ((try? RemoteTarget.parse(raw)) ?? nil)?.normalized ?? paths.resolve(raw)
    }

    /// Refuses mirrors that would write over each other: the same directory, one inside
    /// another (local), a shared state or versions directory, a state or versions
    /// directory inside another mirror.
    private func checkApart(_ all: [Settings], sections: [MirrorSection?], fileName: String) throws {
        func name(_ i: Int) -> String {
            let path = all[i].mirrorName
            return sections[i].map { "mirror \($0.name) (\(path), \(fileName):\($0.line))" } ?? "mirror \(path)"
        }
        for i in all.indices {
            for j in all.indices where j != i {
                let a = all[i], b = all[j]
                if i < j, a.mirror == b.mirror {
                    throw KeepSyncError(.configuration, "\(name(i)) and \(name(j)) are the same directory")
                }
                if i < j, let shared = a.versionsElsewhere, shared == b.versionsElsewhere {
                    throw KeepSyncError(.configuration, "\(name(i)) and \(name(j)) share the versions directory \(Self.display(shared))")
                }
                if i < j, a.state == b.state {
                    throw KeepSyncError(.configuration, "\(name(i)) and \(name(j)) share the state directory \(a.stateName)")
                }
                guard b.remote == nil else { continue }
                if a.remote == nil, a.mirror != b.mirror, Self.isWithin(a.mirror, b.mirror) {
                    throw KeepSyncError(.configuration, "\(name(i)) is inside \(name(j))")
                }
                for (what, path) in [("state", a.state), ("versions", a.versionsElsewhere)] {
                    if let path, Self.isWithin(path, b.mirror) {
                        throw KeepSyncError(.configuration,
                                            "the \(what) directory \(Self.display(path)) of \(name(i)) is inside \(name(j))")
                    }
                }
            }
        }
    }
}
