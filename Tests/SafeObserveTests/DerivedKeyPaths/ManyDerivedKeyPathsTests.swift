import Testing

@testable import SafeObserve

private final class Table: SafeObservable {
    @Observed var cells = Array(repeating: 0, count: 64)
}

/// A subscript argument whose hash is the same for every value: key paths
/// that differ only in it share a hash, so only `==` tells them apart.
private struct Colliding: Hashable, Sendable {
    let index: Int
    func hash(into hasher: inout Hasher) {}
}

extension Table {
    subscript(colliding key: Colliding) -> Int { cells[key.index] }
}

/// One listener observing many derived key paths of one object: each is its
/// own relation, equal ones dedupe, and removing one leaves the others.
/// (Registration compares key paths with `==` only when their hashes match.)
/// Every relation reading `cells` is told each change of it, so the logs
/// below are checked for what each relation's own value says.
@Suite("Many derived key paths on one object")
struct ManyDerivedKeyPathsTests {
    @Test func eachSubscriptKeyPath_isItsOwnRelation_andEqualOnesDedupe() {
        let table = Table()
        let listener = Listener()
        let tokens = (0..<64).map { index in
            table.safeObserve(\.cells[index], by: listener) { listener, _, change in
                listener.record("\(index)=\(change.newValue!)")
            }
        }
        #expect(Set(tokens).count == 64)
        let again = table.safeObserve(\.cells[7], by: listener) { _, _, _ in }
        #expect(again == tokens[7], "an equal key path formed anew must find the first relation")
        table.cells[7] = 1
        #expect(listener.log.filter { $0.hasPrefix("7=") } == ["7=1"], "one delivery for the deduplicated key path")
        #expect(listener.log.count == 64)
        table.safeUnobserve(\.cells[7], by: listener)
        #expect(!tokens[7].isActive)
        #expect(tokens.enumerated().allSatisfy { $0.offset == 7 || $0.element.isActive })
        table.cells[8] = 2
        #expect(listener.log.count == 64 + 63)
        #expect(listener.log.last { $0.hasPrefix("8=") } == "8=2")
        #expect(listener.log.filter { $0.hasPrefix("7=") } == ["7=1"])
    }

    @Test func keyPathsWhoseHashesCollide_areToldApartByEquality() {
        let table = Table()
        let listener = Listener()
        let tokens = (0..<8).map { index in
            table.safeObserve(\.[colliding: Colliding(index: index)], by: listener) { listener, _, change in
                listener.record("\(index)=\(change.newValue!)")
            }
        }
        #expect(Set(tokens).count == 8)
        #expect(table.safeObserve(\.[colliding: Colliding(index: 3)], by: listener) { _, _, _ in } == tokens[3])
        table.safeUnobserve(\.[colliding: Colliding(index: 3)], by: listener)
        #expect(!tokens[3].isActive)
        #expect(tokens.enumerated().allSatisfy { $0.offset == 3 || $0.element.isActive })
        table.cells[4] = 9
        #expect(listener.log.count == 7)
        #expect(listener.log.contains("4=9"))
        #expect(!listener.log.contains { $0.hasPrefix("3=") })
    }
}
