// swift-tools-version: 6.1
import Foundation
import PackageDescription

// SafeObserve's checkout, two folders up; a path dependency's identity is its
// folder's name, which depends on where it was cloned.
let safeObserve = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()

// A package that depends on SafeObserve the way users' packages do, built by
// CI in debug and release, with a static Swift standard library, and as a
// static executable (see .ci/run). Its one program exits non-zero when a
// check fails.
let package = Package(
    name: "ConsumerPackage",
    dependencies: [.package(path: safeObserve.path)],
    targets: [
        .executableTarget(
            name: "ConsumerSmoke",
            dependencies: [
                .product(name: "SafeObserve", package: safeObserve.lastPathComponent),
                .product(name: "SafeObserveFoundation", package: safeObserve.lastPathComponent),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        )
    ]
)
