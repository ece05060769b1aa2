/// What every notification relation's key path is: notification relations
/// are told apart from key-path ones by it (tokens describe them as such).
// nonisolated(unsafe): a key path is immutable, and this one captures nothing.
nonisolated(unsafe) let _notificationKeyPath: AnyKeyPath = \_NotificationMarker.name

/// The root of ``_notificationKeyPath``.
struct _NotificationMarker {
    var name = ""
}

/// What one post delivers to: the snapshots of the relations of the name's
/// channel, of the name's from the sender, of every name's and of every
/// name's from the sender (each `nil` when nobody listens there), and the
/// sender's identity.
///
/// The snapshots are taken under the hub's lock, so a post never holds a
/// channel the hub may reclaim meanwhile: a snapshot holds its relations,
/// and each relation its channel. Every field's layout is known where a
/// post is inlined, and each snapshot is moved, never copied, into the
/// delivery (``NotificationHub/_deliver(_:_:_:root:)``): a post retains
/// nothing but the relation lists.
@usableFromInline
struct _PostTargets {
    @usableFromInline var first: ContiguousArray<_Relation?>?
    @usableFromInline var second: ContiguousArray<_Relation?>?
    @usableFromInline var every: ContiguousArray<_Relation?>?
    @usableFromInline var everyFromSender: ContiguousArray<_Relation?>?
    /// The sender's identity, shared with its sender-filtered channel's
    /// entry, if a snapshot of that channel is here: +1, which the post
    /// takes into its notification (an `Unmanaged`, so that the inlined post
    /// neither copies nor destroys an optional reference).
    @usableFromInline var senderIdentity: Unmanaged<_SenderIdentity>?

    init() {}
}

/// A sender-filtered channel, filed under its (sender, name) pair.
struct SenderEntry: _AddressKeyed {
    let tableKey: ObjectIdentifier
    let sender: ObjectIdentifier
    /// `nil`: every name.
    let nameID: Int?
    let channel: _Channel
    /// What the notifications posted by this sender refer to it by.
    let identity: _SenderIdentity

    /// The key of (`nameID`, `sender`): the sender's address with the name
    /// mixed into the bits the table hashes (above the 16-byte alignment).
    static func key(_ nameID: Int?, _ sender: ObjectIdentifier) -> ObjectIdentifier {
        let name = UInt(bitPattern: (nameID ?? -1) &+ 1) &* 0x9E37_79B9_7F4A_7C15
        // unsafeBitCast: an `ObjectIdentifier` is one word, used here as a
        // hash-table key only (never as an object).
        return unsafeBitCast(UInt(bitPattern: sender) ^ (name &<< 4), to: ObjectIdentifier.self)
    }
}

/// One of the hub's channels, of any kind, filed under the channel's
/// identity: which relations are the hub's, their names and senders, and
/// the sweep.
struct ChannelEntry: _AddressKeyed {
    let channel: _Channel
    /// `nil`: every name.
    let nameID: Int?
    /// The sender the channel filters on; `nil` for an unfiltered channel.
    let sender: ObjectIdentifier?

    var tableKey: ObjectIdentifier { ObjectIdentifier(channel) }
}

/// What ends a channel filtered on a ``SafeObserver`` sender inside the
/// sender's `deinit`: a finalizer on the sender's proxy, as its sequences
/// have. The hub keeps it with the channel, and removes it from the proxy
/// when it drops the channel first (so that a long-lived sender's
/// finalizers follow its channels).
struct SenderFinalizer {
    let proxy: _ListenerProxy
    let id: Int

    /// Removes it from the proxy (unlocked: takes the proxy's lock).
    /// Idempotent.
    func remove() { proxy.removeFinalizer(id) }
}

/// A channel the hub dropped, with its sender's finalizer if it had one:
/// the caller tears the channel down or releases it, and removes the
/// finalizer, after unlocking.
struct RemovedChannel {
    let entry: ChannelEntry
    let finalizer: SenderFinalizer?
}

extension NotificationHub {
    /// The hub's channels: one per name that has observers (and one for
    /// every name), plus one per (name, sender) that a sender-filtered
    /// observer asked for. A channel's object is the hub, or the sender:
    /// the channel holds it unretained (its allocation, not the object, on
    /// the native probes), so no other object can take the sender's address
    /// while the channel exists, and `isGone` tells its death.
    ///
    /// Memory follows the channels: the tables hold the channels that exist,
    /// whatever names the process made, and the sweep reclaims the channels
    /// left without relations (or whose sender died).
    struct State {
        /// The unfiltered channels, by name: one multiplication and one
        /// shift per look-up, and memory that follows the channels.
        var byName = _NameTable()
        /// The sender-filtered channels, by (sender, name) (`nil`: every
        /// name).
        var bySender = _AddressTable<SenderEntry>()
        /// The entries of `bySender` for every name (a post looks there only
        /// if there are some).
        var everyBySenderCount = 0
        /// Every name's unfiltered observers.
        var every: _Channel?
        /// Every channel above, by the channel's identity.
        var channels = _AddressTable<ChannelEntry>()
        /// Round-robin position of the sweep, a slot of `channels`.
        var sweepCursor = 0
        /// The finalizers of the channels filtered on `SafeObserver`
        /// senders, by the channel's identity (no other channel has one).
        var senderFinalizers: [ObjectIdentifier: SenderFinalizer] = [:]

        func unfilteredChannel(_ nameID: Int?) -> _Channel? {
            guard let nameID else { return every }
            return byName.channel(nameID)
        }

        /// The channel of (`nameID`, the sender whose identity is `id`),
        /// whatever that sender's fate.
        func senderChannel(_ nameID: Int?, _ id: ObjectIdentifier) -> _Channel? {
            bySender.first(under: SenderEntry.key(nameID, id)) { entry in
                entry.sender == id && entry.nameID == nameID ? entry.channel : nil
            }
        }

        func senderChannel(_ nameID: Int?, _ sender: AnyObject) -> _Channel? {
            // Not a dead sender's channel at a reused address.
            guard let channel = senderChannel(nameID, ObjectIdentifier(sender)), channel.object.refers(to: sender)
            else { return nil }
            return channel
        }

        /// The channel of (`nameID`, `sender`), if it exists.
        func channel(_ nameID: Int?, sender: AnyObject?) -> _Channel? {
            guard let sender else { return unfilteredChannel(nameID) }
            return senderChannel(nameID, sender)
        }

        /// See ``NotificationHub/_targets(for:sender:)``; called under the
        /// hub's lock. Channels are borrowed from the tables (no retain);
        /// each snapshot is taken under its channel's lock.
        ///
        /// The caller holds `sender` (an `Unmanaged`, so that nothing here
        /// retains it).
        @inline(__always)
        func targets(for nameID: Int, sender: Unmanaged<AnyObject>?) -> _PostTargets? {
            var targets = _PostTargets()
            // Unmanaged: borrowed from the tables, which the caller's lock
            // keeps as they are.
            if let channel = byName.borrowedChannel(nameID) {
                targets.first = channel._withUnsafeGuaranteedRef { $0._eventSnapshot() }
            }
            if let every = every.map(Unmanaged.passUnretained) {
                targets.every = every._withUnsafeGuaranteedRef { $0._eventSnapshot() }
            }
            guard let sender, !bySender.isEmpty else {
                return targets.first == nil && targets.every == nil ? nil : targets
            }
            // unsafeBitCast: the sender's address is its identity.
            let id = unsafeBitCast(sender.toOpaque(), to: ObjectIdentifier.self)
            if let (channel, identity) = borrowedSenderEntry(nameID, id, sender),
                let snapshot = channel._withUnsafeGuaranteedRef({ $0._eventSnapshot() })
            {
                if targets.first == nil { targets.first = snapshot } else { targets.second = snapshot }
                targets.senderIdentity = identity.retain()
            }
            if everyBySenderCount > 0, let (channel, identity) = borrowedSenderEntry(nil, id, sender),
                let snapshot = channel._withUnsafeGuaranteedRef({ $0._eventSnapshot() })
            {
                if targets.every == nil { targets.every = snapshot } else { targets.everyFromSender = snapshot }
                if targets.senderIdentity == nil { targets.senderIdentity = identity.retain() }
            }
            return targets.first == nil && targets.every == nil ? nil : targets
        }

        /// The entry of (`nameID`, `sender`, whose identity is `id`), its
        /// references borrowed (valid while the caller holds the lock), if
        /// it is `sender`'s. The caller holds `sender` (an `Unmanaged`, so
        /// that the look-up's closure captures it without a retain).
        @inline(__always)
        func borrowedSenderEntry(
            _ nameID: Int?, _ id: ObjectIdentifier, _ sender: Unmanaged<AnyObject>
        ) -> (Unmanaged<_Channel>, Unmanaged<_SenderIdentity>)? {
            bySender.first(under: SenderEntry.key(nameID, id)) { entry in
                guard entry.sender == id, entry.nameID == nameID,
                    sender._withUnsafeGuaranteedRef({ entry.channel.object.refers(to: $0) })
                else { return nil }
                return (Unmanaged.passUnretained(entry.channel), Unmanaged.passUnretained(entry.identity))
            }
        }

        /// The hub's entry of `channel`, if it is one of the hub's.
        ///
        /// - Complexity: O(1) expected.
        func entry(of channel: _Channel) -> ChannelEntry? {
            channels.first(under: ObjectIdentifier(channel)) { copy $0 }
        }

        /// The channel of (`nameID`, `sender`), made if missing (`isNew`); a
        /// channel at `sender`'s address that was another (dead) object's
        /// is returned as `stale`, to tear down after unlocking. A new
        /// channel comes with two others to sweep, round-robin.
        mutating func channelCreating(
            _ nameID: Int?, sender: AnyObject?, hub: NotificationHub
        ) -> (channel: _Channel, isNew: Bool, stale: RemovedChannel?, probes: (_Channel?, _Channel?)) {
            guard let sender else {
                if let channel = unfilteredChannel(nameID) { return (channel, false, nil, (nil, nil)) }
                let channel = _Channel(object: hub, keyPath: nil)
                if let nameID {
                    byName.insert(channel, for: nameID)
                } else {
                    every = channel
                }
                return (channel, true, nil, filed(channel, nameID, sender: nil))
            }
            let id = ObjectIdentifier(sender)
            var stale: RemovedChannel?
            if let channel = senderChannel(nameID, id) {
                guard !channel.object.refers(to: sender) else { return (channel, false, nil, (nil, nil)) }
                stale = remove(channel)
            }
            let channel = _Channel(object: sender, keyPath: nil)
            bySender.insert(
                SenderEntry(
                    tableKey: SenderEntry.key(nameID, id), sender: id, nameID: nameID, channel: channel,
                    identity: _SenderIdentity(channel.object)))
            if nameID == nil { everyBySenderCount += 1 }
            return (channel, true, stale, filed(channel, nameID, sender: id))
        }

        /// Files a new channel in `channels`; returns two others to sweep.
        private mutating func filed(_ channel: _Channel, _ nameID: Int?, sender: ObjectIdentifier?) -> (
            _Channel?, _Channel?
        ) {
            let first = nextSweepCandidate()
            let second = nextSweepCandidate()
            channels.insert(ChannelEntry(channel: channel, nameID: nameID, sender: sender))
            _checkInvariants()
            return (first, second === first ? nil : second)
        }

        /// The next channel, round-robin, for the sweep; `nil` if 16 slots
        /// in a row are empty (bounded work: the table shrinks below 1/8
        /// load, so a channel is usually a few slots away).
        private mutating func nextSweepCandidate() -> _Channel? {
            for _ in 0..<Swift.min(16, channels.capacity) {
                if sweepCursor >= channels.capacity { sweepCursor = 0 }
                defer { sweepCursor += 1 }
                if let entry = channels.element(inSlot: sweepCursor) { return entry.channel }
            }
            return nil
        }

        /// Forgets `channel` and its sender's finalizer; `nil` if it was not
        /// here. The caller releases the entry and removes the finalizer
        /// after unlocking.
        ///
        /// - Complexity: O(1) expected.
        mutating func remove(_ channel: _Channel) -> RemovedChannel? {
            guard let entry = channels.remove(under: ObjectIdentifier(channel), where: { $0.channel === channel })
            else { return nil }
            let finalizer =
                entry.sender != nil && !senderFinalizers.isEmpty
                ? senderFinalizers.removeValue(forKey: ObjectIdentifier(channel)) : nil
            if let sender = entry.sender {
                bySender.remove(under: SenderEntry.key(entry.nameID, sender)) { $0.channel === channel }
                if entry.nameID == nil { everyBySenderCount -= 1 }
            } else if let nameID = entry.nameID {
                byName.remove(nameID)
            } else {
                every = nil
            }
            _checkInvariants()
            return RemovedChannel(entry: entry, finalizer: finalizer)
        }

        /// Keeps `finalizer` with `channel`; `false` if the hub dropped the
        /// channel meanwhile (then the caller removes the finalizer).
        ///
        /// - Complexity: O(1) expected.
        mutating func file(_ finalizer: SenderFinalizer, for channel: _Channel) -> Bool {
            guard entry(of: channel) != nil else { return false }
            senderFinalizers[ObjectIdentifier(channel)] = finalizer
            _checkInvariants()
            return true
        }

        /// Checks that the tables agree, after each change of the channels
        /// (under `SAFEOBSERVE_INTERNAL_CHECKS`, while they are few).
        func _checkInvariants() {
            #if SAFEOBSERVE_INTERNAL_CHECKS
                guard channels.count <= 64 else { return }
                precondition(
                    channels.count == byName.count + bySender.count + (every == nil ? 0 : 1),
                    "NotificationHub: channel index out of step")
                precondition(
                    everyBySenderCount == bySender.elements.filter { $0.nameID == nil }.count,
                    "NotificationHub: every-name sender channels miscounted")
                for entry in channels.elements {
                    let filed: _Channel?
                    if let sender = entry.sender {
                        filed = senderChannel(entry.nameID, sender)
                    } else {
                        filed = unfilteredChannel(entry.nameID)
                    }
                    precondition(filed === entry.channel, "NotificationHub: a channel is missing from its table")
                }
                for key in senderFinalizers.keys {
                    precondition(
                        channels.first(under: key, { $0.sender != nil ? true : nil }) == true,
                        "NotificationHub: a sender finalizer outlived its channel")
                }
            #endif
        }

        func allChannels() -> [_Channel] {
            channels.elements.map(\.channel)
        }
    }

    /// What a post of `nameID` from `sender` delivers to (`nil`: nobody
    /// listens); nothing for a post from inside the sender's own `deinit`
    /// (it can no longer be handed to anyone).
    ///
    /// - Complexity: O(1) expected: up to three look-ups, and a snapshot of
    ///   each channel found (a lock and a retain).
    @usableFromInline
    func _targets(for nameID: Int, sender: AnyObject) -> _PostTargets? {
        if _swift_isDeallocating(sender) { return nil }
        // Unmanaged: the caller holds the sender throughout.
        let sender = Unmanaged.passUnretained(sender)
        // The channels' locks are taken under the hub's: a channel's lock
        // takes no other, and no lock is held while the hub's is taken.
        return state.withLock { state in state.targets(for: nameID, sender: sender) }
    }

    /// What a post of `nameID` without a sender delivers to (the common
    /// case, kept apart from the sender's look-ups).
    ///
    /// - Complexity: O(1) expected: one look-up, and a snapshot of each
    ///   channel found (a lock and a retain).
    @usableFromInline
    func _targets(for nameID: Int) -> _PostTargets? {
        state.withLock { state in state.targets(for: nameID, sender: nil) }
    }

    /// Delivers the notification at `pointer` to `snapshot`, which it takes
    /// (inlined, so that the caller knows the snapshot is gone, and releases
    /// nothing for it).
    @inlinable @inline(__always)
    func _deliver(_ snapshot: inout ContiguousArray<_Relation?>?, _ pointer: UnsafeRawPointer, root: AnyObject) {
        if let relations = snapshot.take() { _deliverNotification(relations, pointer, root: root) }
    }

    /// Registers `listener` on the channel of (`nameID`, `sender`).
    @usableFromInline
    func _register(nameID: Int?, sender: AnyObject?, listener: AnyObject, deliver: @escaping _Deliver)
        -> ObservationToken
    {
        let inert = ObservationToken(inertWith: .new)
        if _swift_isDeallocating(listener) {
            _Diagnostics.reportProgrammerError(
                "SafeObserve: cannot observe notifications by a \(type(of: listener)) during its own deinit")
            return inert
        }
        // A sender in its deinit can post nothing more: nothing to observe.
        if let sender, _swift_isDeallocating(sender) { return inert }
        // Again with a new proxy if the listener's was retired meanwhile, or
        // with a new channel if the sweep reclaimed this one meanwhile.
        while true {
            guard let proxy = _ListenerProxy.of(listener, create: true) else { return inert }
            let (channel, isNew, stale, probes) = state.withLock {
                $0.channelCreating(nameID, sender: sender, hub: self)
            }
            if let stale {
                stale.finalizer?.remove()
                stale.entry.channel.tearDown()
            }
            if isNew, let sender { fileSenderFinalizer(for: channel, sender: sender) }
            if let probe = probes.0 { sweep(probe) }
            if let probe = probes.1 { sweep(probe) }
            let relation = _Relation(
                keyPath: _notificationKeyPath, objectID: ObjectIdentifier(channel), options: .new, proxy: proxy,
                channel: channel, deliver: deliver)
            var existing: _Relation?
            guard proxy.insert(relation, existing: &existing) else {
                if _swift_isDeallocating(listener) { return inert }
                continue
            }
            if let existing { return ObservationToken(existing) }
            let token = ObservationToken(relation)
            if channel.add(relation) { return token }
            // Refused: a concurrent removal ended the relation (it stays
            // ended), or the sweep reclaimed the channel, which had no
            // relation left, meanwhile (the caller holds the hub and the
            // sender, so neither died).
            guard relation.isActive else { return token }
            relation.end()
        }
    }

    /// Files, on the proxy of `sender` if it adopts ``SafeObserver``, a
    /// finalizer that ends `channel` (just made, filtered on `sender`)
    /// inside the sender's `deinit`: its relations end and their handlers
    /// are released there, whatever posts wait for their actors, as a
    /// ``SafeObserver`` listener's do. Any other sender's channel ends when
    /// found dead (the next registration's sweep, or a look at the
    /// relations). The caller holds `sender`.
    ///
    /// - Complexity: O(1) expected; once per channel, never on a post.
    private func fileSenderFinalizer(for channel: _Channel, sender: AnyObject) {
        guard let proxy = _ListenerProxy.ofSafeObserver(sender) else { return }
        let ends: @Sendable () -> Void = { [weak self, weak channel] in
            guard let self, let channel else { return }
            self.senderDied(channel)
        }
        // The caller holds the sender, so its proxy is not torn down.
        guard let id = proxy.addFinalizer(ends) else { return }
        let finalizer = SenderFinalizer(proxy: proxy, id: id)
        if !state.withLock({ $0.file(finalizer, for: channel) }) { finalizer.remove() }
    }

    /// Inside the `deinit` of `channel`'s `SafeObserver` sender (its
    /// finalizer, which its proxy's teardown took already): ends the
    /// channel's relations, releasing their handlers.
    private func senderDied(_ channel: _Channel) {
        if let removed = state.withLock({ $0.remove(channel) }) {
            channel.tearDown()
            _ = removed  // released unlocked
        }
    }

    /// Reclaims `channel` if its sender died (tearing it down) or no
    /// relation is left on it. Probed unlocked: a liveness probe must not
    /// run under the lock.
    @inline(never)
    private func sweep(_ channel: _Channel) {
        if channel.object.isGone {
            if let removed = state.withLock({ $0.remove(channel) }) {
                removed.finalizer?.remove()
                channel.tearDown()
            }
        } else if channel._isUnobserved {
            let removed = state.withLock { state -> RemovedChannel? in
                // Retired under the hub's lock, so that no registration
                // finds it after; one that found it before is refused by it.
                guard state.entry(of: channel) != nil, channel._retireIfUnobserved() else { return nil }
                return state.remove(channel)
            }
            // Unlocked: the entry is released, the finalizer removed.
            removed?.finalizer?.remove()
        }
    }

    /// Each channel with its name's identity (`nil`: every name), for the
    /// graph of live relations.
    func _namedChannels() -> [(nameID: Int?, channel: _Channel)] {
        state.withLock { state in state.channels.elements.map { ($0.nameID, $0.channel) } }
    }

    /// How many sender-filtered channels the hub holds (tests).
    var _senderChannelCount: Int {
        state.withLock { $0.bySender.count }
    }

    /// How many channels the hub holds, of every kind (tests).
    var _channelCount: Int {
        state.withLock { $0.channels.count }
    }

    /// The slots of the hub's table of names (tests: memory follows the
    /// names the hub has channels for).
    var _nameTableCapacity: Int {
        state.withLock { $0.byName.capacity }
    }
}

/// Delivers the notification at `pointer` to the relations of a snapshot
/// (see ``_PostTargets``), then releases it (unlocked). The caller holds
/// `root`.
///
/// A function, not a method, and consuming: so that the optimizer gives it
/// no other signature, which a post would reach through a thunk.
@usableFromInline
@_semantics("optimize.sil.specialize.owned2guarantee.never")
func _deliverNotification(
    _ relations: consuming ContiguousArray<_Relation?>, _ pointer: UnsafeRawPointer, root: AnyObject
) {
    _Channel.Emission(relations: relations, needs: [], probe: _Probe.current)
        .deliverEvent(root: root, change: pointer)
}

extension _Channel {
    /// The relations an event (a notification) is delivered to: a snapshot
    /// of the list, or `nil` when nobody listens.
    ///
    /// - Complexity: O(1): a lock and a retain of the list.
    @inline(__always)
    func _eventSnapshot() -> ContiguousArray<_Relation?>? {
        state.withLock { state in state.liveCount > 0 ? state.relations : nil }
    }

    /// Whether no relation is on the channel (a hint, for the sweep).
    var _isUnobserved: Bool {
        state.withLock { $0.liveCount == 0 }
    }

    /// Refuses every later relation if none is on the channel now (a hub
    /// reclaiming it); `true` if it did.
    func _retireIfUnobserved() -> Bool {
        state.withLock { state in
            guard !state.isTornDown, state.liveCount == 0 else { return false }
            state.isTornDown = true
            return true
        }
    }
}

/// The live hubs, weakly (the graph of live relations lists their
/// observers).
enum _NotificationHubs {
    private struct Entry {
        weak var hub: NotificationHub?
    }

    private static let table = _Mutex<[ObjectIdentifier: Entry]>([:])

    static func insert(_ hub: NotificationHub) {
        table.withLock { $0[ObjectIdentifier(hub)] = Entry(hub: hub) }
    }

    static func remove(_ hub: NotificationHub) {
        _ = table.withLock { $0.removeValue(forKey: ObjectIdentifier(hub)) }
    }

    /// The hubs alive now.
    static func all() -> [NotificationHub] {
        table.withLock { $0.values.compactMap(\.hub) }
    }
}
