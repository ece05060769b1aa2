import SafeObserve
import Testing

/// A handler that, while a change is delivered, changes *another* dependency
/// of a derived key path (found by the public-API attack of 2026-11-29).
///
/// What "Derived key paths" documents: a relation on the derived key path
/// registered *before* the relation whose handler nests the change is told
/// both changes in stored order, old values chained (the workaround, tested
/// here); one registered after is not yet (the known limitation, recorded
/// with `withKnownIssue`: these fail as soon as it is fixed, to be turned
/// into plain expectations then).
@Suite("Derived key paths: nested changes of another dependency")
struct NestedChangesOfOtherDependenciesTests {
    final class Person: SafeObservable {
        @Observed var first = "Ada"
        @Observed var last = "Lovelace"
        var fullName: String { first + " " + last }
    }

    final class Account: SafeObservable {
        @Observed var balance: Int
        init(balance: Int = 0) { self.balance = balance }
    }

    final class Owner: SafeObservable {
        @Observed var account = Account()
    }

    final class Log {
        var entries: [String] = []
        func record<Value>(_ change: ObservedChange<Value>) {
            entries.append(
                change.isPrior
                    ? "prior(\(change.oldValue.map { "\($0)" } ?? "nil"))"
                    : "\(change.oldValue.map { "\($0)" } ?? "nil")->\(change.newValue.map { "\($0)" } ?? "nil")")
        }
    }

    // MARK: The workaround: the derived relation registered first

    @Test func aComputedPropertysRelation_registeredBeforeTheNestingOne_isToldBothChangesInOrder() {
        let person = Person()
        let early = Log()
        let nesting = Log()
        person.safeObserve(\.fullName, by: early, options: [.old, .new]) { log, _, change in log.record(change) }
        var nested = false
        person.safeObserve(\.fullName, by: nesting, options: [.old, .new]) { log, person, change in
            log.record(change)
            if !nested {
                nested = true
                person.last = "Byron"
            }
        }
        person.first = "Grace"
        let expected = ["Ada Lovelace->Grace Lovelace", "Grace Lovelace->Grace Byron"]
        #expect(early.entries == expected)
        #expect(nesting.entries == expected)
    }

    @Test func aComputedPropertysRelation_registeredBeforeASinglePropertyOneThatNests_isToldBothChangesInOrder() {
        let nestingListener = Log()
        let person = Person()
        let derived = Log()
        person.safeObserve(\.fullName, by: derived, options: [.old, .new]) { log, _, change in log.record(change) }
        var nested = false
        person.safeObserve(\.first, by: nestingListener) { _, person, _ in
            if !nested {
                nested = true
                person.last = "Byron"
            }
        }
        person.first = "Grace"
        #expect(derived.entries == ["Ada Lovelace->Grace Lovelace", "Grace Lovelace->Grace Byron"])
        withExtendedLifetime(nestingListener) {}
    }

    @Test func aChainsRelation_registeredBeforeTheOneReplacingALink_isToldBothChangesInOrder() {
        let owner = Owner()
        let early = Log()
        let replacing = Log()
        owner.safeObserve(\.account.balance, by: early, options: [.old, .new]) { log, _, change in log.record(change) }
        var replaced = false
        owner.safeObserve(\.account.balance, by: replacing, options: [.old, .new]) { log, owner, change in
            log.record(change)
            if !replaced {
                replaced = true
                owner.account = Account(balance: 100)
            }
        }
        owner.account.balance = 5
        #expect(early.entries == ["0->5", "5->100"])
        #expect(replacing.entries == ["0->5", "5->100"])
    }

    @Test func aChainsRelation_registeredBeforeASinglePropertyOneReplacingALink_isToldBothChangesInOrder() {
        let nestingListener = Log()
        let owner = Owner()
        let derived = Log()
        owner.safeObserve(\.account.balance, by: derived, options: [.old, .new]) { log, _, change in log.record(change)
        }
        var replaced = false
        owner.account.safeObserve(\.balance, by: nestingListener) { [unowned owner] _, _, _ in
            if !replaced {
                replaced = true
                owner.account = Account(balance: 100)
            }
        }
        owner.account.balance = 5
        #expect(derived.entries == ["0->5", "5->100"])
        withExtendedLifetime(nestingListener) {}
    }

    // MARK: The known limitation

    @Test func aComputedPropertysRelation_registeredAfterTheNestingOne_isToldTheNestedChangeFirst() {
        let nestingListener = Log()
        let person = Person()
        var nested = false
        person.safeObserve(\.fullName, by: nestingListener, options: [.old, .new]) { _, person, _ in
            if !nested {
                nested = true
                person.last = "Byron"
            }
        }
        let late = Log()
        person.safeObserve(\.fullName, by: late, options: [.old, .new]) { log, _, change in log.record(change) }
        person.first = "Grace"
        #expect(late.entries.last?.hasSuffix("->Grace Byron") == true, "the last new value is the current value")
        withKnownIssue("a nested change of another dependency reaches later derived relations first") {
            #expect(late.entries == ["Ada Lovelace->Grace Lovelace", "Grace Lovelace->Grace Byron"])
        }
        withExtendedLifetime(nestingListener) {}
    }

    @Test func aChainsRelation_registeredAfterTheOneReplacingALink_isNotToldTheOuterChange() {
        let nestingListener = Log()
        let owner = Owner()
        var replaced = false
        owner.safeObserve(\.account.balance, by: nestingListener, options: [.old, .new]) { _, owner, _ in
            if !replaced {
                replaced = true
                owner.account = Account(balance: 100)
            }
        }
        let late = Log()
        owner.safeObserve(\.account.balance, by: late, options: [.old, .new]) { log, _, change in log.record(change) }
        owner.account.balance = 5
        #expect(late.entries.last?.hasSuffix("->100") == true, "the last new value is the current value")
        withKnownIssue("a replaced link hides the outer change from later chain relations") {
            #expect(late.entries == ["0->5", "5->100"])
        }
        withExtendedLifetime(nestingListener) {}
    }

    @Test func aDerivedPriorHandlerChangingAnotherDependency_isNotAnnouncedTheOuterChangeAgain() {
        let person = Person()
        let nesting = Log()
        var nested = false
        person.safeObserve(\.fullName, by: nesting, options: [.old, .new, .prior]) { log, person, change in
            log.record(change)
            if change.isPrior, !nested {
                nested = true
                person.last = "Byron"
            }
        }
        person.first = "Grace"
        #expect(nesting.entries.last?.hasSuffix("->Grace Byron") == true, "the last new value is the current value")
        withKnownIssue("a derived prior handler's nested change of another dependency is not re-announced") {
            #expect(
                nesting.entries == [
                    "prior(Ada Lovelace)", "Ada Lovelace->Ada Byron", "prior(Ada Byron)", "Ada Byron->Grace Byron",
                ])
        }
    }
}
