// swift-tools-version:6.0
import PackageDescription

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
        .target(name: "KeepSyncCore"),
        .target(name: "KeepSyncLinux", dependencies: ["KeepSyncCore", "CKeepSyncShims"]),
        .executableTarget(
            name: "keepsync", dependencies: ["KeepSyncCore", "KeepSyncLinux"],
            // The Swift runtime linked in: a faster cold start and ~2.5 MB less resident.
            linkerSettings: [.unsafeFlags(["-static-stdlib"])]
        ),
        .executableTarget(name: "keepsync-bench"),
        .target(name: "KeepSyncTestSupport", dependencies: ["KeepSyncCore"]),
        .testTarget(name: "KeepSyncCoreTests", dependencies: ["KeepSyncCore", "KeepSyncTestSupport"]),
        .testTarget(name: "KeepSyncLinuxTests", dependencies: ["KeepSyncCore", "KeepSyncLinux", "KeepSyncTestSupport"]),
        .testTarget(name: "EndToEndTests", dependencies: ["KeepSyncCore", "KeepSyncLinux", "CKeepSyncShims"]),
    ]
)
