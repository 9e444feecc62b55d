// swift-tools-version: 6.2
//
// An app that uses Ferry: copy this folder to start one. The README's "In an app" mirrors it.
import PackageDescription

let package = Package(
    name: "TodoCLI",
    // The SDK needs macOS 15 / iOS 18 (Linux: any).
    platforms: [.macOS(.v15), .iOS(.v18)],
    dependencies: [
        // `name:` makes `package: "Ferry"` below work whatever the checkout's folder is called
        // (without it a path dependency is known by its folder's name: "ferry", "ferry-main", …).
        // From a URL instead: `.package(url: "https://…/ferry.git", branch: "main")`, known by the
        // URL's last component ("ferry", which "Ferry" matches: case does not count).
        .package(name: "Ferry", path: "../..")
    ],
    targets: [
        .executableTarget(
            name: "TodoCLI",
            dependencies: [
                .product(name: "SyncCore", package: "Ferry"),
                .product(name: "StoreSQLite", package: "Ferry"),
                .product(name: "Transport", package: "Ferry"),
            ]
        )
    ],
    swiftLanguageModes: [.v6]
)
