import Foundation
import Synchronization

/// Threads started together; ``finished`` once each one's body returned.
final class Threads: Sendable {
    private let returned = Atomic<Int>(0)
    private let count: Int

    /// Starts `count` threads, each running `body(index)`.
    init(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        self.count = count
        for index in 0..<count {
            Thread { [self] in
                body(index)
                returned.add(1, ordering: .releasing)
            }.start()
        }
    }

    var finished: Bool { returned.load(ordering: .acquiring) == count }
}
