import Testing

@testable import SafeObserve

/// A computed property of the user's at the end of a path: it reads `value`,
/// and `other` too when `value` is negative, so a change of `value` can
/// change what it reads — it must never be taken for a chain's last link.
final class BranchingLeaf: SafeObservable {
    @Observed var value = 1
    @Observed var other = 100
    var reading: Int { value >= 0 ? value : other }
}

final class BranchingRoot: SafeObservable {
    @Observed var leaf = BranchingLeaf()
    /// The same object as `leaf`, through a computed property of the user's.
    var leafAgain: BranchingLeaf { leaf }
}

/// A subclass of a chain's root: `\ChainSubRoot.b.c.value` spells the
/// inherited `b` from the subclass.
class ChainBaseRoot: SafeObservable {
    @Observed var b = NodeB()
}
final class ChainSubRoot: ChainBaseRoot {}

/// A root whose subclass overrides the chain's first link with a getter that
/// returns another object than the one stored: the chain must be read
/// through that getter, never from storage.
class OverriddenLinkRoot: SafeObservable {
    @Observed var b = NodeB()
}
final class RedirectingRoot: OverriddenLinkRoot {
    let elsewhere = NodeB()
    override var b: NodeB {
        get {
            _ = super.b
            return elsewhere
        }
        set { super.b = newValue }
    }
}

/// Holds a link that may be replaced by an instance of `RedirectingRoot`,
/// whose getter for `b` returns another object than the one stored.
final class OverridableHolder: SafeObservable {
    @Observed var middle = OverriddenLinkRoot()
}

/// A chain whose last link holds a value with a reference inside (copied
/// out of storage, it must be retained).
final class TitledLeaf: SafeObservable {
    @Observed var title = "untitled"
}
final class TitledMiddle: SafeObservable {
    @Observed var leaf = TitledLeaf()
}
final class TitledRoot: SafeObservable {
    @Observed var middle = TitledMiddle()
}

/// A chain whose middle link may be an instance of a subclass with fields of
/// its own (before and after the inherited ones in memory). The subclass
/// overrides nothing, but nothing can tell: its instances are read through
/// their getters, and the values are the same.
class MiddleLink: SafeObservable {
    @Observed var c = NodeC()
}
final class WideMiddleLink: MiddleLink {
    let label = "wide"
    @Observed var extra = NodeC()
}
final class WideRoot: SafeObservable {
    @Observed var middle = MiddleLink()
}

/// Whether the derivation behind `token` reads its chain from storage.
func readsFromStorage(_ token: ObservationToken) -> Bool {
    guard let relation = token._liveRelation as? _DerivedRelation else { return false }
    return relation.derivation.state.withLock { $0.chainLayout } != nil
}

/// A chain key path formed in generic code: a new key-path object per call.
private func observeLeaf<Root: ChainBaseRoot>(of root: Root, by listener: Listener) {
    root.safeObserve(\.b.c.value, by: listener, options: [.old, .new]) { listener, _, change in
        listener.record(describe(change))
    }
}

/// The last link of a chain of `@Observed` properties forwards its change;
/// everything else re-tracks. Both must deliver the same values.
@Suite("Derived key paths: the last link of a chain")
struct ChainFastPathTests {
    /// The shape test itself: equal to the read properties' key paths appended.
    @Test func onlyAKeyPathMadeOfTheReadPropertiesIsAChain() {
        let root = BranchingRoot()
        func isChain(_ keyPath: KeyPath<BranchingRoot, Int>) -> Bool {
            let accesses = _AccessTracker.resolve { _ = root[keyPath: keyPath] }
            return _KeyPathShape.isChain(keyPath, readAs: accesses)
        }
        #expect(isChain(\.leaf.value))
        #expect(!isChain(\.leaf.reading), "a computed property of the user's at the end")
        #expect(!isChain(\.leafAgain.value), "a computed property of the user's in the middle")
        let person = Person()
        let accesses = _AccessTracker.resolve { _ = person.account.balance }
        #expect(_KeyPathShape.isChain(\Person.account.balance, readAs: accesses))
        #expect(!_KeyPathShape.isChain(\Person.account, readAs: accesses), "fewer components than reads")
        #expect(!_KeyPathShape.isChain(\Person.first, readAs: Array(accesses.prefix(1))), "one read is no chain")
    }

    @Test func aLeafChange_deliversNewOldAndPrior_likeASingleProperty() {
        let a = NodeA(b: NodeB())
        let listener = Listener()
        a.safeObserve(\.b.c.value, by: listener, options: [.old, .new, .prior]) { listener, _, change in
            listener.record(describe(change))
        }
        a.b.c.value = 1
        a.b.c.value += 1  // in place
        #expect(listener.log == ["0->nil prior", "0->1", "1->nil prior", "1->2"])
    }

    @Test func aLeafChange_withoutOld_deliversOnlyTheNewValue() {
        let a = NodeA(b: NodeB())
        let listener = Listener()
        // Another relation on the leaf asks for `.old`: the change carries it,
        // but this relation did not ask for it.
        a.b.c.safeObserve(\.value, by: Listener(), options: [.old]) { _, _, _ in }
        a.safeObserve(\.b.c.value, by: listener) { listener, _, change in listener.record(describe(change)) }
        a.b.c.value = 5
        #expect(listener.log == ["nil->5"])
    }

    /// Issue 13's ordering guarantee, through a chain: a handler that sets
    /// the leaf again makes a later relation see the changes in order,
    /// ending on the current value.
    @Test func nestedLeafChanges_reachALaterRelationInOrder_endingOnTheCurrentValue() {
        let a = NodeA(b: NodeB())
        let first = Listener()
        let later = Listener()
        a.safeObserve(\.b.c.value, by: first) { _, a, change in
            if change.newValue! < 3 { a.b.c.value += 1 }
        }
        a.safeObserve(\.b.c.value, by: later, options: [.old, .new]) { later, _, change in
            later.record(describe(change))
        }
        a.b.c.value = 1
        #expect(a.b.c.value == 3)
        #expect(later.log.last == "2->3", "the last delivered value is the current one: \(later.log)")
        let news = later.log.map { $0.split(separator: ">").last.map(String.init) ?? "" }
        #expect(news == news.sorted(), "never back to an older value: \(later.log)")
    }

    @Test func aComputedPropertyAtTheEnd_keepsFollowingItsBranches() {
        let root = BranchingRoot()
        let listener = Listener()
        root.safeObserve(\.leaf.reading, by: listener) { listener, _, change in listener.record(describe(change)) }
        root.leaf.value = -1  // now reads `other`
        root.leaf.other = 7
        #expect(listener.log == ["nil->100", "nil->7"])
    }

    @Test func aComputedPropertyInTheMiddle_isReTracked_andDeliversTheSameValues() {
        let root = BranchingRoot()
        let listener = Listener()
        root.safeObserve(\.leafAgain.value, by: listener) { listener, _, change in listener.record(describe(change)) }
        root.leaf.value = 2
        root.leaf = BranchingLeaf()
        root.leaf.value = 3
        #expect(listener.log == ["nil->2", "nil->1", "nil->3"])
    }

    @Test func afterAnIntermediateIsReplaced_theNewLeafForwards_andTheOldOneIsForgotten() {
        let a = NodeA(b: NodeB())
        let listener = Listener()
        a.safeObserve(\.b.c.value, by: listener, options: [.old, .new]) { listener, _, change in
            listener.record(describe(change))
        }
        let oldC = a.b.c
        let newC = NodeC()
        newC.value = 10
        a.b.c = newC
        oldC.value = 99
        newC.value = 11
        #expect(listener.log == ["0->10", "10->11"])
        #expect(watchers(of: oldC) == 0)
    }

    @Test func theLeafHandlerUnobservingOrReleasingTheListener_stopsDelivery() {
        let a = NodeA(b: NodeB())
        var listener: Listener? = Listener()
        weak let weakListener = listener
        a.safeObserve(\.b.c.value, by: listener!) { listener, a, change in
            listener.record(describe(change))
            a.safeUnobserve(\.b.c.value, by: listener)
        }
        a.b.c.value = 1
        a.b.c.value = 2
        #expect(listener?.log == ["nil->1"])
        listener = nil
        #expect(weakListener == nil)
        #expect(watchers(of: a.b.c) == 0)
    }

    @Test func aChainSpelledFromASubclass_orFormedInGenericCode_deliversAndReTargets() {
        for makeRoot in [{ ChainSubRoot() as ChainBaseRoot }, { ChainBaseRoot() }] {
            let root = makeRoot()
            let spelled = Listener()
            let generic = Listener()
            if let sub = root as? ChainSubRoot {
                sub.safeObserve(\ChainSubRoot.b.c.value, by: spelled, options: [.old, .new]) { listener, _, change in
                    listener.record(describe(change))
                }
            } else {
                root.safeObserve(\.b.c.value, by: spelled, options: [.old, .new]) { listener, _, change in
                    listener.record(describe(change))
                }
            }
            observeLeaf(of: root, by: generic)
            root.b.c.value = 1
            let oldC = root.b.c
            root.b.c = NodeC()
            oldC.value = 50
            root.b.c.value = 2
            #expect(spelled.log == ["0->1", "1->0", "0->2"])
            #expect(generic.log == ["0->1", "1->0", "0->2"])
        }
    }

    @Test func onlyAChainOfStoredLinks_isReadFromStorage() {
        let listener = Listener()
        let a = NodeA(b: NodeB())
        #expect(readsFromStorage(a.safeObserve(\.b.c.value, by: listener) { _, _, _ in }))
        let root = BranchingRoot()
        #expect(!readsFromStorage(root.safeObserve(\.leafAgain.value, by: listener) { _, _, _ in }))
        #expect(!readsFromStorage(root.safeObserve(\.leaf.reading, by: listener) { _, _, _ in }))
        // Spelled from the base class, the key path is the stored links'
        // (from the subclass, the override's: not a chain at all).
        let redirecting: OverriddenLinkRoot = RedirectingRoot()
        #expect(!readsFromStorage(redirecting.safeObserve(\.b.c.value, by: listener) { _, _, _ in }))
    }

    @Test func replacingIntermediates_readsTheNewLinks_andWatchesObjectsNeverObservedBefore() {
        let a = NodeA(b: NodeB())
        let listener = Listener()
        a.safeObserve(\.b.c.value, by: listener, options: [.old, .new, .prior]) { listener, _, change in
            listener.record(describe(change))
        }
        let oldB = a.b
        let newB = NodeB()
        newB.c.value = 7
        a.b = newB
        oldB.c.value = 50
        newB.c.value = 8
        let newC = NodeC()
        newC.value = 9
        newB.c = newC
        newC.value = 10
        #expect(
            listener.log == [
                "0->nil prior", "0->7", "7->nil prior", "7->8", "8->nil prior", "8->9", "9->nil prior", "9->10",
            ])
        #expect(watchers(of: oldB) == 0 && watchers(of: oldB.c) == 0)
        #expect(watchers(of: newB) == 1 && watchers(of: newC) == 1)
    }

    @Test func aLinkOverriddenByASubclassGetter_isReadThroughTheGetter() {
        let root = RedirectingRoot()
        root.elsewhere.c.value = 5
        let listeners = [Listener(), Listener()]
        for (spelling, listener) in zip([root as OverriddenLinkRoot, root], listeners) {
            spelling.safeObserve(\.b.c.value, by: listener, options: [.old, .new]) { listener, _, change in
                listener.record(describe(change))
            }
        }
        // The setter stores another object; the getter still returns `elsewhere`.
        root.b = NodeB()
        root.elsewhere.c.value = 6
        #expect(listeners.map(\.log) == [["5->5", "5->6"], ["5->5", "5->6"]])
    }

    @Test func aLinkReplacedByAnOverridingSubclassInstance_isReadThroughItsGetter() {
        let holder = OverridableHolder()
        let listener = Listener()
        let token = holder.safeObserve(\.middle.b.c.value, by: listener, options: [.old, .new]) { listener, _, change in
            listener.record(describe(change))
        }
        #expect(readsFromStorage(token))
        let redirecting = RedirectingRoot()
        redirecting.elsewhere.c.value = 42
        // Its getter returns `elsewhere`, never the `b` it stores: a read of
        // the storage would find 0, and watch the stored object.
        holder.middle = redirecting
        redirecting.elsewhere.c.value = 43
        // The stored link changes; the getter (and the value, old and new) does not.
        redirecting.b = NodeB()
        holder.middle = OverriddenLinkRoot()
        #expect(listener.log == ["0->42", "42->43", "43->43", "43->0"])
        #expect(watchers(of: redirecting.elsewhere.c) == 0)
    }

    @Test func aLeafValueReadFromStorage_isACopyThatOutlivesTheChain() {
        var root: TitledRoot? = TitledRoot()
        weak let weakRoot = root
        let listener = Listener()
        var titles: [String] = []
        root!.safeObserve(\.middle.leaf.title, by: listener, options: [.old, .new]) { _, _, change in
            titles.append(change.oldValue! + "->" + change.newValue!)
        }
        let middle = TitledMiddle()
        middle.leaf.title = String(repeating: "long title ", count: 4)
        root!.middle = middle
        root!.middle = TitledMiddle()
        root = nil
        #expect(weakRoot == nil)
        let long = String(repeating: "long title ", count: 4)
        #expect(titles == ["untitled->" + long, long + "->untitled"])
    }

    @Test func aLinkReplacedByASubclassInstance_deliversWhatItsGettersReturn() {
        let root = WideRoot()
        let listener = Listener()
        let token = root.safeObserve(\.middle.c.value, by: listener, options: [.old, .new]) { listener, _, change in
            listener.record(describe(change))
        }
        #expect(readsFromStorage(token))
        let wide = WideMiddleLink()
        wide.c.value = 4
        wide.extra.value = 99
        root.middle = wide
        wide.extra.value = 100
        wide.c.value = 5
        root.middle = MiddleLink()
        #expect(listener.log == ["0->4", "4->5", "5->0"])
        #expect(watchers(of: wide.c) == 0 && watchers(of: wide.extra) == 0)
    }
}
