/// What a derivation's dependency must tell its state machine: the channel
/// it watches (`nil` once it let go of it).
protocol _DerivationDependency: AnyObject {
    var channelID: ObjectIdentifier? { get }
}

extension _Relation: _DerivationDependency {
    var channelID: ObjectIdentifier? { channel.map(ObjectIdentifier.init) }
}

/// The state of one ``_Derivation``, as a state machine in the style of
/// swift-async-algorithms' channel storage.
///
/// Every transition is a pure, synchronous `mutating` function, called under
/// the derivation's lock: it evaluates no key path, calls no handler and
/// releases nothing that could run user code. It returns an action saying
/// what the derivation does *after unlocking* — evaluate the key path,
/// deliver, end the relation, or release values and dependencies that it
/// took out of the state.
///
/// ```
///            start                 stop / root died
///   idle ──────────────▶ watching ──────────────────▶ stopped
///                         │  ▲
///          will-change,   │  │  rebind (after every re-evaluation)
///          did-change,    └──┘
///          prior-abandoned, dependency-torn-down
/// ```
///
/// `Dependency` is generic so that the transitions can be unit-tested with
/// stand-ins; the derivation uses ``_Relation``.
struct _DerivationStateMachine<Dependency: _DerivationDependency> {
    enum Stage {
        /// Created; `start` has not run.
        case idle
        /// Watching the properties the last evaluation read.
        case watching
        /// The user's relation ended: every transition is a no-op from here.
        case stopped
    }

    private(set) var stage = Stage.idle
    /// The user's relation (unretained: it owns the derivation).
    private(set) var relation: _UnretainedReference?
    /// The observed root object (unretained).
    private(set) var root: _UnretainedReference?
    /// The dependency relations, one per channel, in the order the last
    /// evaluation read them. A key path reads a handful: a list beats hashing.
    private(set) var dependencies: [Dependency] = []
    /// Values captured before a change, per thread and dependency channel,
    /// most recent last.
    private(set) var pendingOld: [(thread: UInt, channel: ObjectIdentifier, value: Any)] = []
    /// The channel of the last link, when the dependencies are a chain of
    /// stored `@Observed` links read in key-path order (``_KeyPathShape``): a
    /// change there changes the value but never the dependencies.
    private(set) var leafChannel: ObjectIdentifier?
    /// The shape last found for a list of links (the read properties' own
    /// key paths, by identity), so that re-binding to the same properties on
    /// other objects does not compare key paths again.
    private(set) var knownShape: (links: [ObjectIdentifier], isChain: Bool)?
    /// Where a chain's links keep their values (with ``knownShape``, when
    /// it is a chain and its layout was confirmed): evaluations then read
    /// the links from storage.
    private(set) var chainLayout: _ChainLayout?

    // MARK: Transitions

    /// `idle → watching`.
    mutating func start(relation: AnyObject, root: AnyObject) {
        defer { _checkInvariants() }
        guard stage == .idle else { return }
        stage = .watching
        self.relation = _UnretainedReference(relation)
        self.root = _UnretainedReference(root)
    }

    /// What to do after ``rebind(to:isChain:links:layout:makeDependency:)``:
    /// end ``forEachDropped(_:)``'s dependencies, attach ``added``, release
    /// ``abandoned`` (all unlocked).
    ///
    /// Nothing is copied into it: it shares the dependency lists from before
    /// and after the re-bind (copy-on-write buffers), in which the kept
    /// dependencies keep their order. Releasing it releases the dropped ones.
    struct RebindAction {
        /// The dependencies before the re-bind.
        fileprivate(set) var previous: [Dependency] = []
        /// The dependencies after it: the `keptCount` kept (in their order
        /// in `previous`), then the added ones.
        fileprivate(set) var bound: [Dependency] = []
        fileprivate(set) var keptCount = 0
        var abandoned: [Any] = []

        /// The dependencies made by the re-bind, to attach.
        var added: ArraySlice<Dependency> { bound[keptCount...] }

        /// Calls `body` with each dependency the re-bind dropped, in order.
        ///
        /// - Complexity: O(*n*) in the dependencies before the re-bind (a
        ///   merge: the kept ones are a subsequence of them).
        func forEachDropped(_ body: (Dependency) -> Void) {
            var kept = 0
            for dependency in previous {
                if kept < keptCount, bound[kept] === dependency {
                    kept += 1
                } else {
                    body(dependency)
                }
            }
        }

        /// The dropped dependencies, in order (an array: for the old values
        /// waiting for them, and tests).
        var dropped: [Dependency] {
            var dropped: [Dependency] = []
            forEachDropped { dropped.append($0) }
            return dropped
        }
    }

    /// Makes the dependencies exactly `channels` (in this order), keeping
    /// those already there and making the missing ones with `makeDependency`
    /// (given the index in `channels`; it must not run user code). `isChain`
    /// says whether the key path is a chain of stored links whose last read
    /// was `channels.last`; with `links` (the read properties' key paths),
    /// that verdict is remembered for them (see ``isChain(links:)``), with
    /// the chain's `layout` if it has one.
    ///
    /// - Complexity: O(*d*), *d* being the properties the key path reads:
    ///   linear scans for a handful, identity sets beyond that.
    mutating func rebind(
        to channels: [ObjectIdentifier], isChain: Bool, links: [ObjectIdentifier]? = nil,
        layout: _ChainLayout? = nil, makeDependency: (Int) -> Dependency
    ) -> RebindAction {
        rebind(
            toChannels: channels.count, at: { channels[$0] }, isChain: isChain, links: links, layout: layout,
            makeDependency: makeDependency)
    }

    /// ``rebind(to:isChain:links:layout:makeDependency:)`` with the
    /// channels given by index (`count` of them), so that the caller builds
    /// no array of them.
    mutating func rebind(
        toChannels count: Int, at channel: (Int) -> ObjectIdentifier, isChain: Bool,
        links: [ObjectIdentifier]? = nil, layout: _ChainLayout? = nil, makeDependency: (Int) -> Dependency
    ) -> RebindAction {
        defer { _checkInvariants() }
        if let links {
            knownShape = (links, isChain)
            chainLayout = isChain ? layout : nil
        }
        guard stage == .watching else { return RebindAction() }
        leafChannel = isChain && count > 0 ? channel(count - 1) : nil
        var next: [Dependency] = []
        next.reserveCapacity(count)
        guard count <= 8, dependencies.count <= 8 else {
            // Many (a computed property reading a collection): identity sets.
            let wanted = Set((0..<count).map(channel))
            for dependency in dependencies where dependency.channelID.map(wanted.contains) ?? false {
                next.append(dependency)
            }
            let keptCount = next.count
            var bound = Set(next.lazy.compactMap(\.channelID))
            for index in 0..<count where bound.insert(channel(index)).inserted {
                next.append(makeDependency(index))
            }
            return replaceDependencies(with: next, keeping: keptCount)
        }
        // A handful (every chain one would spell): the identities of the
        // channels read, and of those bound, copied to the stack and
        // summarized in one-word filters; a linear scan of plain words only
        // where a filter says an identity may be there — no hashing, no
        // allocation, no call per comparison. Only elements written are
        // read; `ObjectIdentifier` is trivial, so nothing is deinitialized.
        return withUnsafeTemporaryAllocation(of: ObjectIdentifier.self, capacity: 16) { buffer in
            var wantedFilter: UInt64 = 0
            for index in 0..<count {
                let id = channel(index)
                buffer.initializeElement(at: index, to: id)
                wantedFilter |= Self.filterBit(id)
            }
            let wanted = UnsafeBufferPointer(rebasing: buffer[..<count])
            var boundFilter: UInt64 = 0
            var keptCount = 0
            for dependency in dependencies {
                guard let id = dependency.channelID, wantedFilter & Self.filterBit(id) != 0, wanted.contains(id)
                else { continue }
                buffer.initializeElement(at: 8 + keptCount, to: id)
                boundFilter |= Self.filterBit(id)
                keptCount += 1
                next.append(dependency)
            }
            // Then the kept and those made so far: every channel read before.
            var bound = 8 + keptCount
            for index in 0..<count {
                let id = wanted[index]
                if boundFilter & Self.filterBit(id) != 0,
                    UnsafeBufferPointer(rebasing: buffer[8..<bound]).contains(id)
                {
                    continue
                }
                buffer.initializeElement(at: bound, to: id)
                boundFilter |= Self.filterBit(id)
                bound += 1
                next.append(makeDependency(index))
            }
            return replaceDependencies(with: next, keeping: keptCount)
        }
    }

    /// `id`'s bit in a one-word filter of identities: the top six bits of a
    /// multiplicative (Fibonacci) hash of the address, which spreads
    /// addresses that differ only in a few middle bits.
    @inline(__always)
    private static func filterBit(_ id: ObjectIdentifier) -> UInt64 {
        1 &<< ((UInt64(UInt(bitPattern: id)) &* 0x9E37_79B9_7F4A_7C15) &>> 58)
    }

    /// The end of a re-bind: `next` (the first `keptCount` of which were
    /// dependencies already, in their order) becomes the dependencies.
    @inline(__always)
    private mutating func replaceDependencies(with next: [Dependency], keeping keptCount: Int) -> RebindAction {
        if keptCount == dependencies.count, next.count == keptCount {
            return RebindAction(previous: dependencies, bound: dependencies, keptCount: keptCount)
        }
        var action = RebindAction(previous: dependencies, bound: next, keptCount: keptCount)
        dependencies = next
        if keptCount < action.previous.count, !pendingOld.isEmpty {
            action.abandoned = abandonPendingOld(of: action.dropped)
        }
        return action
    }

    /// The user's relation and root, for a transition whose action needs
    /// them (loaded, and probed, after unlocking).
    struct Target {
        let relation: _UnretainedReference
        let root: _UnretainedReference
    }

    /// What to do when a dependency is about to change (its prior phase).
    enum WillChangeAction {
        /// Nothing (stopped).
        case none
        /// Evaluate the key path (the old value; through `chain`, the
        /// chain's layout, if it has one), hand it to
        /// ``captured(_:channel:thread:)``, and deliver the prior phase if
        /// the relation asked for it.
        case capture(Target, chain: _ChainLayout?)
        /// The last link of a chain: forward its prior phase, which carries
        /// the old value, to the relation as it is.
        case forward(Target)
    }

    /// The dependency on `channel` is about to change; `forwards` says
    /// whether that dependency was made as a chain's last link (one made
    /// otherwise captures, whatever the state says).
    func willChange(channel: ObjectIdentifier, forwards: Bool) -> WillChangeAction {
        guard stage == .watching, let target else { return .none }
        return forwards && channel == leafChannel ? .forward(target) : .capture(target, chain: chainLayout)
    }

    /// `old`, the key path's value before the coming change of the
    /// dependency on `channel` on `thread`, was evaluated: keep it for that
    /// change, or hand it back (to release unlocked) if stopped meanwhile.
    mutating func captured(_ old: Any, channel: ObjectIdentifier, thread: UInt) -> Any? {
        defer { _checkInvariants() }
        guard stage == .watching else { return old }
        pendingOld.append((thread, channel, old))
        return nil
    }

    /// What to do after a dependency changed.
    enum DidChangeAction {
        /// Nothing (stopped).
        case none
        /// Evaluate the key path while tracking what it reads (or read the
        /// links of `chain`, the chain's layout, if it has one), rebind to
        /// that, and deliver the value with `old`.
        case evaluate(Target, old: Any?, chain: _ChainLayout?)
        /// The last link of a chain: its change is the key path's change;
        /// forward it to the relation as it is.
        case forward(Target)
    }

    /// The dependency on `channel` changed on `thread`. Takes the old value
    /// captured for it (the most recent: changes nest); the last link of a
    /// chain (`forwards`, as for ``willChange(channel:forwards:)``) needs
    /// neither that nor an evaluation.
    mutating func didChange(channel: ObjectIdentifier, thread: UInt, forwards: Bool) -> DidChangeAction {
        defer { _checkInvariants() }
        guard stage == .watching, let target else { return .none }
        if forwards, channel == leafChannel { return .forward(target) }
        return .evaluate(target, old: takePendingOld(thread: thread, channel: channel), chain: chainLayout)
    }

    /// The relation and root, while watching.
    var target: Target? {
        guard let relation, let root else { return nil }
        return Target(relation: relation, root: root)
    }

    /// The change announced on `channel` was abandoned (its mutation threw):
    /// the old value captured for it, to release unlocked.
    mutating func priorAbandoned(channel: ObjectIdentifier, thread: UInt) -> Any? {
        defer { _checkInvariants() }
        return takePendingOld(thread: thread, channel: channel)
    }

    /// What to do after a dependency's object died.
    enum TornDownAction {
        /// Not a dependency any more (or stopped).
        case none
        /// Forgotten: release these (unlocked).
        case release(Dependency, abandoned: [Any])
        /// Forgotten, and it was the last: nothing can change the value any
        /// more, so end the user's relation too.
        case endRelation(Dependency, abandoned: [Any])
    }

    /// `dependency`'s object died (inside its `deinit`): forget it, without
    /// evaluating anything (the key path may reach the dying object).
    mutating func dependencyTornDown(_ dependency: Dependency) -> TornDownAction {
        defer { _checkInvariants() }
        guard stage == .watching, let index = dependencies.firstIndex(where: { $0 === dependency }) else {
            return .none
        }
        let removed = dependencies.remove(at: index)
        let abandoned = abandonPendingOld(of: [removed])
        if removed.channelID == leafChannel { leafChannel = nil }
        return dependencies.isEmpty
            ? .endRelation(removed, abandoned: abandoned) : .release(removed, abandoned: abandoned)
    }

    /// What to do after stopping: end `dependencies` and release `abandoned`
    /// (unlocked).
    struct StopAction {
        var dependencies: [Dependency] = []
        var abandoned: [Any] = []
    }

    /// `→ stopped`, from any stage. Idempotent.
    mutating func stop() -> StopAction {
        defer {
            stage = .stopped
            dependencies = []
            pendingOld = []
            leafChannel = nil
            _checkInvariants()
        }
        return StopAction(dependencies: dependencies, abandoned: pendingOld.map(\.value))
    }

    /// Whether the dependencies are exactly `channels`, in this order (then
    /// a re-bind to them would change nothing, the chain's shape included).
    func isBound(exactly channels: some Collection<ObjectIdentifier>) -> Bool {
        stage == .watching && dependencies.count == channels.count
            && zip(dependencies, channels).allSatisfy { $0.channelID == $1 }
    }

    /// Whether the links `links` were found to be a chain before (`nil`:
    /// not checked for these links).
    func isChain(links: some Collection<ObjectIdentifier>) -> Bool? {
        knownShape.flatMap { $0.links.elementsEqual(links) ? $0.isChain : nil }
    }

    // MARK: Invariants

    /// Checked after each mutating transition under
    /// `SAFEOBSERVE_INTERNAL_CHECKS`: a stopped machine holds nothing; one
    /// dependency per channel; the chain's last link, if any, is a
    /// dependency's; a layout only for a key path found to be a chain.
    func _checkInvariants() {
        #if SAFEOBSERVE_INTERNAL_CHECKS
            if stage == .stopped {
                precondition(
                    dependencies.isEmpty && pendingOld.isEmpty && leafChannel == nil,
                    "_DerivationStateMachine: stopped but still holding dependencies or values")
            }
            if stage == .idle {
                precondition(dependencies.isEmpty, "_DerivationStateMachine: dependencies before start")
            }
            let channels = dependencies.compactMap(\.channelID)
            precondition(
                Set(channels).count == channels.count, "_DerivationStateMachine: two dependencies on a channel")
            if let leafChannel {
                precondition(channels.contains(leafChannel), "_DerivationStateMachine: the leaf is no dependency's")
            }
            if chainLayout != nil {
                precondition(knownShape?.isChain == true, "_DerivationStateMachine: a layout for no chain")
            }
        #endif
    }

    // MARK: Helpers

    private mutating func takePendingOld(thread: UInt, channel: ObjectIdentifier) -> Any? {
        guard let index = pendingOld.lastIndex(where: { $0.thread == thread && $0.channel == channel })
        else { return nil }
        return pendingOld.remove(at: index).value
    }

    /// Removes the values waiting for a change of one of `dropped`, which no
    /// longer deliver (so would never collect them).
    private mutating func abandonPendingOld(of dropped: some Collection<Dependency>) -> [Any] {
        guard !pendingOld.isEmpty else { return [] }
        var abandoned: [Any] = []
        pendingOld.removeAll { entry in
            let isAbandoned = dropped.contains { $0.channelID == entry.channel }
            if isAbandoned { abandoned.append(entry.value) }
            return isAbandoned
        }
        return abandoned
    }
}
