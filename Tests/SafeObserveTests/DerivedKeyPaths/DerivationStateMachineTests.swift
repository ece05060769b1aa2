import Testing

@testable import SafeObserve

/// A stand-in dependency: a channel identity and nothing else.
private final class Dependency: _DerivationDependency {
    let channelID: ObjectIdentifier?
    init(_ channel: ObjectIdentifier) { channelID = channel }
}

/// Distinct identities to stand for channels, relations and roots.
private final class Token {}

/// One test per transition of `_DerivationStateMachine`, named for its
/// situation. The machine is pure, so these need no channel, lock or thread.
@Suite("Internal: the derivation state machine")
struct DerivationStateMachineTests {
    private typealias Machine = _DerivationStateMachine<Dependency>

    private let relation = Token()
    private let root = Token()
    private let channels = (0..<4).map { _ in Token() }
    private var ids: [ObjectIdentifier] { channels.map(ObjectIdentifier.init) }

    private func watching(_ channels: [ObjectIdentifier], isChain: Bool = false) -> Machine {
        var machine = Machine()
        machine.start(relation: relation, root: root)
        _ = machine.rebind(to: channels, isChain: isChain) { Dependency(channels[$0]) }
        return machine
    }

    @Test func start_fromIdle_watchesTheRelationAndRoot_andOnlyOnce() {
        var machine = Machine()
        #expect(machine.stage == .idle)
        #expect(machine.target == nil)
        machine.start(relation: relation, root: root)
        #expect(machine.stage == .watching)
        #expect(machine.target?.relation.load() === relation)
        machine.start(relation: Token(), root: Token())
        #expect(machine.target?.root.load() === root, "a second start changes nothing")
    }

    @Test func rebind_beforeStart_bindsNothing() {
        var machine = Machine()
        let action = machine.rebind(to: ids, isChain: false) { _ in
            Issue.record("made")
            return Dependency(ids[0])
        }
        #expect(action.added.isEmpty && machine.dependencies.isEmpty)
    }

    @Test func rebind_keepsWhatStays_makesWhatIsNew_andDropsTheRest() {
        var machine = watching([ids[0], ids[1]])
        let kept = machine.dependencies[0]
        var made: [Int] = []
        let action = machine.rebind(to: [ids[0], ids[2]], isChain: false) { index in
            made.append(index)
            return Dependency([ids[0], ids[2]][index])
        }
        #expect(made == [1], "only the new channel gets a dependency")
        #expect(action.dropped.map(\.channelID) == [ids[1]])
        #expect(action.added.map(\.channelID) == [ids[2]])
        #expect(machine.dependencies.first === kept)
        #expect(machine.dependencies.map(\.channelID) == [ids[0], ids[2]])
    }

    @Test func rebind_ofAHandfulOfChannels_readingOneTwice_makesOneDependencyForIt() {
        // Eight reads (the most the linear path takes), one channel twice.
        let reads = [ids[0], ids[1], ids[2], ids[1], ids[3], ids[0], ids[2], ids[3]]
        var machine = watching([ids[0]], isChain: true)
        var made: [Int] = []
        let action = machine.rebind(to: reads, isChain: false) { index in
            made.append(index)
            return Dependency(reads[index])
        }
        #expect(made == [1, 2, 4], "one dependency per new channel, at its first read")
        #expect(action.dropped.isEmpty)
        #expect(machine.dependencies.map(\.channelID) == [ids[0], ids[1], ids[2], ids[3]])
        #expect(machine.leafChannel == nil)
        // Shrinking to a chain of two: the others are dropped, the last read is the leaf.
        let shrunk = machine.rebind(to: [ids[3], ids[1]], isChain: true) { _ in
            Issue.record("nothing is new")
            return Dependency(ids[0])
        }
        #expect(shrunk.dropped.map(\.channelID) == [ids[0], ids[2]])
        #expect(machine.dependencies.map(\.channelID) == [ids[1], ids[3]])
        #expect(machine.leafChannel == ids[1])
    }

    @Test func rebind_ofManyChannels_usesSets_andKeepsOneDependencyPerChannel() {
        let many = (0..<20).map { _ in Token() }
        let manyIDs = many.map(ObjectIdentifier.init)
        var machine = watching(manyIDs)
        #expect(machine.dependencies.count == 20)
        let action = machine.rebind(to: manyIDs + manyIDs.prefix(5), isChain: false) { _ in
            Issue.record("nothing is new")
            return Dependency(manyIDs[0])
        }
        #expect(action.added.isEmpty && action.dropped.isEmpty)
        _ = many
    }

    @Test func rebind_ofAChain_makesItsLastChannelTheLeaf_andOfAnythingElse_none() {
        var machine = watching([ids[0], ids[1]], isChain: true)
        #expect(machine.leafChannel == ids[1])
        _ = machine.rebind(to: [ids[0], ids[1]], isChain: false) { Dependency(ids[$0]) }
        #expect(machine.leafChannel == nil)
    }

    @Test func rebind_dropsTheOldValuesWaitingForADroppedDependency() {
        var machine = watching([ids[0], ids[1]])
        _ = machine.captured("waiting", channel: ids[1], thread: 1)
        let action = machine.rebind(to: [ids[0]], isChain: false) { Dependency(ids[$0]) }
        #expect(action.abandoned.map { $0 as! String } == ["waiting"])
        #expect(machine.pendingOld.isEmpty)
    }

    @Test func willChange_ofTheLeaf_forwards_andOfAnyOtherDependency_capturesTheOldValue() {
        let machine = watching([ids[0], ids[1]], isChain: true)
        guard case .forward = machine.willChange(channel: ids[1], forwards: true) else {
            Issue.record("the leaf forwards its prior phase")
            return
        }
        guard case .capture(let target, _) = machine.willChange(channel: ids[0], forwards: false) else {
            Issue.record("an intermediate captures the old value")
            return
        }
        #expect(target.root.load() === root)
    }

    @Test func willChange_afterStop_doesNothing() {
        var machine = watching([ids[0]])
        _ = machine.stop()
        guard case .none = machine.willChange(channel: ids[0], forwards: false) else {
            Issue.record("a stopped derivation evaluates nothing")
            return
        }
    }

    @Test func captured_keepsTheValueForItsChange_orHandsItBackWhenStopped() {
        var machine = watching([ids[0]])
        #expect(machine.captured(1, channel: ids[0], thread: 7) == nil)
        #expect(machine.pendingOld.count == 1)
        _ = machine.stop()
        #expect(machine.captured(2, channel: ids[0], thread: 7) as? Int == 2)
        #expect(machine.pendingOld.isEmpty)
    }

    @Test func didChange_takesTheMostRecentOldValueOfItsThreadAndChannel() {
        var machine = watching([ids[0], ids[1]])
        _ = machine.captured("outer", channel: ids[0], thread: 1)
        _ = machine.captured("other thread", channel: ids[0], thread: 2)
        _ = machine.captured("other channel", channel: ids[1], thread: 1)
        _ = machine.captured("nested", channel: ids[0], thread: 1)
        for expected in ["nested", "outer"] {
            guard case .evaluate(_, let old, _) = machine.didChange(channel: ids[0], thread: 1, forwards: false) else {
                Issue.record("a dependency's change re-evaluates and re-tracks")
                return
            }
            #expect(old as? String == expected)
        }
        #expect(machine.pendingOld.map { $0.value as! String } == ["other thread", "other channel"])
    }

    @Test func didChange_ofTheLeaf_forwards_withoutTakingAnOldValue() {
        var machine = watching([ids[0], ids[1]], isChain: true)
        guard case .forward = machine.didChange(channel: ids[1], thread: 1, forwards: true) else {
            Issue.record("the leaf forwards its change")
            return
        }
    }

    @Test func didChange_afterStop_doesNothing() {
        var machine = watching([ids[0]])
        _ = machine.stop()
        guard case .none = machine.didChange(channel: ids[0], thread: 1, forwards: false) else {
            Issue.record("a stopped derivation delivers nothing")
            return
        }
    }

    @Test func priorAbandoned_handsBackOnlyThatChangesOldValue() {
        var machine = watching([ids[0], ids[1]])
        _ = machine.captured("a", channel: ids[0], thread: 1)
        _ = machine.captured("b", channel: ids[1], thread: 1)
        #expect(machine.priorAbandoned(channel: ids[0], thread: 1) as? String == "a")
        #expect(machine.priorAbandoned(channel: ids[0], thread: 1) == nil)
        #expect(machine.pendingOld.count == 1)
    }

    @Test func dependencyTornDown_forgetsIt_andItsOldValues() {
        var machine = watching([ids[0], ids[1]], isChain: true)
        _ = machine.captured("x", channel: ids[1], thread: 1)
        let leaf = machine.dependencies[1]
        guard case .release(let released, let abandoned) = machine.dependencyTornDown(leaf) else {
            Issue.record("one dependency is left: the relation goes on")
            return
        }
        #expect(released === leaf)
        #expect(abandoned.count == 1)
        #expect(machine.leafChannel == nil, "a torn-down leaf forwards nothing")
        #expect(machine.dependencies.count == 1)
    }

    @Test func dependencyTornDown_ofTheLast_endsTheRelation() {
        var machine = watching([ids[0]])
        guard case .endRelation = machine.dependencyTornDown(machine.dependencies[0]) else {
            Issue.record("no dependency left: nothing can change the value")
            return
        }
    }

    @Test func dependencyTornDown_ofAnUnknownDependency_doesNothing() {
        var machine = watching([ids[0]])
        guard case .none = machine.dependencyTornDown(Dependency(ids[3])) else {
            Issue.record("not one of its dependencies")
            return
        }
        #expect(machine.dependencies.count == 1)
    }

    @Test func stop_handsBackEverything_andIsIdempotent() {
        var machine = watching([ids[0], ids[1]], isChain: true)
        _ = machine.captured("x", channel: ids[0], thread: 1)
        let first = machine.stop()
        #expect(first.dependencies.count == 2 && first.abandoned.count == 1)
        #expect(machine.stage == .stopped && machine.leafChannel == nil)
        let second = machine.stop()
        #expect(second.dependencies.isEmpty && second.abandoned.isEmpty)
        let action = machine.rebind(to: ids, isChain: false) { Dependency(ids[$0]) }
        #expect(action.added.isEmpty, "a stopped derivation binds nothing")
    }

    @Test func isBoundExactly_onlyForTheSameChannelsInTheSameOrder_whileWatching() {
        var machine = watching([ids[0], ids[1]])
        #expect(machine.isBound(exactly: [ids[0], ids[1]]))
        #expect(!machine.isBound(exactly: [ids[1], ids[0]]), "another order may change the chain's last link")
        #expect(!machine.isBound(exactly: [ids[0]]))
        #expect(!machine.isBound(exactly: [ids[0], ids[1], ids[0]]), "a channel read twice re-binds")
        _ = machine.stop()
        #expect(!machine.isBound(exactly: []))
    }

    @Test func theShapeOfALinkList_isRememberedForThoseLinksOnly() {
        var machine = Machine()
        machine.start(relation: relation, root: root)
        #expect(machine.isChain(links: [ids[0], ids[1]]) == nil)
        _ = machine.rebind(to: [ids[2], ids[3]], isChain: true, links: [ids[0], ids[1]]) { Dependency(ids[2 + $0]) }
        #expect(machine.isChain(links: [ids[0], ids[1]]) == true)
        #expect(machine.isChain(links: [ids[1], ids[0]]) == nil)
    }

    /// Random re-binds, on both paths (a handful of channels, and more than
    /// eight), checked against the obvious model: the dependencies kept keep
    /// their order and object, one is made for each other channel at its
    /// first read, the rest are dropped in order, and the action says
    /// exactly that.
    @Test(arguments: [1, 2, 3, 4])
    func rebind_matchesTheModel_overRandomSequencesOfReads(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let pool = (0..<20).map { _ in Token() }
        let poolIDs = pool.map(ObjectIdentifier.init)
        var machine = Machine()
        machine.start(relation: relation, root: root)
        for _ in 0..<300 {
            let count = Int(random.next() % 13)
            // Mostly from a few channels (re-reads, kept ones), sometimes from all.
            let spread = random.next() % 3 == 0 ? poolIDs.count : 6
            let reads = (0..<count).map { _ in poolIDs[Int(random.next() % UInt64(spread))] }
            let before = machine.dependencies
            let kept = before.filter { reads.contains($0.channelID!) }
            var expectedMade: [Int] = []
            for (index, id) in reads.enumerated()
            where !kept.contains(where: { $0.channelID == id }) && !reads[..<index].contains(id) {
                expectedMade.append(index)
            }
            var made: [Int] = []
            let action = machine.rebind(to: reads, isChain: random.next() % 2 == 0) { index in
                made.append(index)
                return Dependency(reads[index])
            }
            #expect(made == expectedMade)
            // Compared outside `#expect`, whose expansion of `elementsEqual(_:by:)`
            // warns in some build orders.
            let keptInPlace = machine.dependencies.prefix(kept.count).elementsEqual(kept, by: ===)
            #expect(keptInPlace)
            #expect(machine.dependencies.dropFirst(kept.count).map(\.channelID) == expectedMade.map { reads[$0] })
            let addedAreTheNewOnes = action.added.elementsEqual(machine.dependencies.dropFirst(kept.count), by: ===)
            #expect(addedAreTheNewOnes)
            let droppedAreTheOthers = action.dropped.elementsEqual(
                before.filter { d in !kept.contains { $0 === d } }, by: ===)
            #expect(droppedAreTheOthers)
        }
        _ = pool
    }

    @Test func aDependencyNotMadeAsTheLeaf_capturesAndEvaluates_evenOnTheLeafChannel() {
        var machine = watching([ids[0], ids[1]], isChain: true)
        guard case .capture = machine.willChange(channel: ids[1], forwards: false) else {
            Issue.record("only a dependency made as the last link forwards")
            return
        }
        _ = machine.captured("old", channel: ids[1], thread: 1)
        guard case .evaluate(_, let old, _) = machine.didChange(channel: ids[1], thread: 1, forwards: false) else {
            Issue.record("only a dependency made as the last link forwards")
            return
        }
        #expect(old as? String == "old")
    }
}
