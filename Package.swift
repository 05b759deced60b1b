// swift-tools-version:6.0
import PackageDescription

let optimizedInDebug: [SwiftSetting] = [.unsafeFlags(["-O"], .when(configuration: .debug))]

let package = Package(
    name: "keepsync",
    products: [
        .executable(name: "keepsync", targets: ["keepsync"]),
        .executable(name: "keepsync-bench", targets: ["keepsync-bench"]),
    ],
    targets: [
        .target(
            name: "CKeepSyncShims",
            cSettings: [.define("_GNU_SOURCE")]
        ),
        // Optimized in debug builds too: the simulation runs thousands of seeds through it.
        .target(name: "KeepSyncCore", swiftSettings: optimizedInDebug),
        .target(name: "KeepSyncLinux", dependencies: ["KeepSyncCore", "CKeepSyncShims"]),
        .executableTarget(
            name: "keepsync", dependencies: ["KeepSyncCore", "KeepSyncLinux"],
            // The Swift runtime linked in: a faster cold start and ~2.5 MB less resident.
            linkerSettings: [.unsafeFlags(["-static-stdlib"])]
        ),
        .executableTarget(name: "keepsync-bench", exclude: ["README.md"]),
        .target(name: "KeepSyncTestSupport", dependencies: ["KeepSyncCore"], swiftSettings: optimizedInDebug),
        .testTarget(name: "KeepSyncCoreTests", dependencies: ["KeepSyncCore", "KeepSyncTestSupport"], swiftSettings: optimizedInDebug),
        .testTarget(name: "KeepSyncLinuxTests", dependencies: ["KeepSyncCore", "KeepSyncLinux", "CKeepSyncShims", "KeepSyncTestSupport"]),
        .testTarget(name: "EndToEndTests", dependencies: ["KeepSyncCore", "KeepSyncLinux", "CKeepSyncShims", "KeepSyncTestSupport"]),
    ]
)
