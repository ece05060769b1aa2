/// What every notification relation's key path is: notification relations
/// are told apart from key-path ones by it (tokens describe them as such).
// nonisolated(unsafe): a key path is immutable, and this one captures nothing.
nonisolated(unsafe) let _notificationKeyPath: AnyKeyPath = \_NotificationMarker.name

/// The root of ``_notificationKeyPath``.
struct _NotificationMarker {
    var name = ""
}

/// The channels one post delivers to, without an allocation or a retain:
/// the name's, the name's from the sender, every name's, every name's from
/// the sender.
///
/// Borrowed: a channel found for a post stays in the hub's state until the
/// post returns. A name's channels live as long as the hub; a sender's are
/// removed only once the sweep finds their sender dead, or replaced when
/// another object registers at a dead sender's address; and the poster
/// holds both the hub and the sender.
/// Each is an `Unmanaged` reference, used through `_withUnsafeGuaranteedRef`
/// (an `unowned(unsafe)` one would still be retained when loaded).
@usableFromInline
struct _PostTargets {
    @usableFromInline var first: Unmanaged<_Channel>?
    @usableFromInline var second: Unmanaged<_Channel>?
    @usableFromInline var every: Unmanaged<_Channel>?
    @usableFromInline var everyFromSender: Unmanaged<_Channel>?
    /// The sender's identity, kept by its sender-filtered channel's entry
    /// (borrowed as the channels are), if it has one.
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

extension NotificationHub {
    /// The hub's channels: one per name (and one for every name), plus one
    /// per (name, sender) that a sender-filtered observer asked for. A
    /// channel's object is the hub, or the sender: the channel holds it
    /// unretained (its allocation, not the object, on the native probes), so
    /// no other object can take the sender's address while the channel
    /// exists, and `isGone` tells its death.
    struct State {
        /// The channel of each name's unfiltered observers, by name identity.
        var unfiltered: [_Channel?] = []
        /// The sender-filtered channels, by (sender, name) (`nil`: every
        /// name): one multiplicative hash and no allocation per look-up.
        var bySender = _AddressTable<SenderEntry>()
        /// The entries of `bySender` for every name (a post looks there only
        /// if there are some).
        var everyBySenderCount = 0
        /// Every name's unfiltered observers.
        var every: _Channel?
        /// The sender-filtered channels, in creation order, for the
        /// amortized sweep of dead senders.
        var senderChannels: [(nameID: Int?, sender: ObjectIdentifier, channel: _Channel)] = []
        var sweepCursor = 0

        func unfilteredChannel(_ nameID: Int?) -> _Channel? {
            guard let nameID else { return every }
            return nameID < unfiltered.count ? unfiltered[nameID] : nil
        }

        /// The channel of (`nameID`, the sender whose identity is `id`),
        /// whatever that sender's fate.
        func senderChannel(_ nameID: Int?, _ id: ObjectIdentifier) -> _Channel? {
            bySender.first(under: SenderEntry.key(nameID, id)) { entry in
                entry.sender == id && entry.nameID == nameID ? entry.channel : nil
            }
        }

        /// The entry of (`nameID`, `sender`, whose identity is `id`), its
        /// references borrowed (see `_PostTargets`), if it is `sender`'s.
        func borrowedSenderEntry(
            _ nameID: Int?, _ id: ObjectIdentifier, _ sender: AnyObject
        ) -> (Unmanaged<_Channel>, Unmanaged<_SenderIdentity>)? {
            bySender.first(under: SenderEntry.key(nameID, id)) { entry in
                guard entry.sender == id, entry.nameID == nameID, entry.channel.object.refers(to: sender) else {
                    return nil
                }
                return (Unmanaged.passUnretained(entry.channel), Unmanaged.passUnretained(entry.identity))
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

        /// The channel of (`nameID`, `sender`), made if missing; a channel
        /// at `sender`'s address that was another (dead) object's is
        /// returned as `stale`, to tear down after unlocking. Also returns
        /// two sender-filtered channels to probe for dead senders.
        mutating func channelCreating(
            _ nameID: Int?, sender: AnyObject?, hub: NotificationHub
        ) -> (channel: _Channel, stale: _Channel?, probes: [_Channel]) {
            guard let sender else {
                if let channel = unfilteredChannel(nameID) { return (channel, nil, []) }
                let channel = _Channel(object: hub, keyPath: nil)
                if let nameID {
                    if unfiltered.count <= nameID {
                        unfiltered.append(contentsOf: repeatElement(nil, count: nameID + 1 - unfiltered.count))
                    }
                    unfiltered[nameID] = channel
                } else {
                    every = channel
                }
                return (channel, nil, [])
            }
            let id = ObjectIdentifier(sender)
            var stale: _Channel?
            if let channel = senderChannel(nameID, id) {
                guard !channel.object.refers(to: sender) else { return (channel, nil, []) }
                stale = channel
                _ = remove(senderChannel: channel)
            }
            let channel = _Channel(object: sender, keyPath: nil)
            bySender.insert(
                SenderEntry(
                    tableKey: SenderEntry.key(nameID, id), sender: id, nameID: nameID, channel: channel,
                    identity: _SenderIdentity(channel.object)))
            senderChannels.append((nameID, id, channel))
            if nameID == nil { everyBySenderCount += 1 }
            _checkInvariants()
            return (channel, stale, nextProbes())
        }

        /// Two sender-filtered channels, round-robin.
        mutating func nextProbes() -> [_Channel] {
            guard !senderChannels.isEmpty else { return [] }
            var probes: [_Channel] = []
            for _ in 0..<min(2, senderChannels.count) {
                if sweepCursor >= senderChannels.count { sweepCursor = 0 }
                probes.append(senderChannels[sweepCursor].channel)
                sweepCursor += 1
            }
            return probes
        }

        /// Forgets `channel` (its sender died); `false` if it was not here.
        mutating func remove(senderChannel channel: _Channel) -> Bool {
            guard let index = senderChannels.firstIndex(where: { $0.channel === channel }) else { return false }
            let (nameID, sender, _) = senderChannels.remove(at: index)
            if nameID == nil { everyBySenderCount -= 1 }
            defer { _checkInvariants() }
            let removed = bySender.remove(under: SenderEntry.key(nameID, sender)) { $0.channel === channel }
            // Released with the state's other garbage, after unlocking, by
            // the caller's `channel` (which it holds).
            _ = removed
            return true
        }

        /// Checks that the sweep's list and the look-up table agree, after
        /// each change of the sender-filtered channels (under
        /// `SAFEOBSERVE_INTERNAL_CHECKS`, while they are few).
        func _checkInvariants() {
            #if SAFEOBSERVE_INTERNAL_CHECKS
                guard senderChannels.count <= 64 else { return }
                precondition(senderChannels.count == bySender.count, "NotificationHub: sender index out of step")
                precondition(
                    everyBySenderCount == senderChannels.filter { $0.nameID == nil }.count,
                    "NotificationHub: every-name sender channels miscounted")
                for (nameID, sender, channel) in senderChannels {
                    precondition(
                        senderChannel(nameID, sender) === channel,
                        "NotificationHub: a sender channel is missing from the index")
                }
            #endif
        }

        func allChannels() -> [_Channel] {
            unfiltered.compactMap { $0 } + (every.map { [$0] } ?? []) + senderChannels.map(\.channel)
        }
    }

    /// The channels a post of `nameID` from `sender` delivers to; none for
    /// a post from inside the sender's own `deinit` (it can no longer be
    /// handed to anyone).
    @usableFromInline
    func _channels(for nameID: Int, sender: AnyObject?) -> _PostTargets {
        var targets = _PostTargets()
        if let sender, _swift_isDeallocating(sender) { return targets }
        state.withLock { state in
            if nameID < state.unfiltered.count {
                targets.first = state.unfiltered.withUnsafeBufferPointer { buffer in
                    // A bitwise copy of the state's reference, without a
                    // retain: borrowed for the post (see `_PostTargets`).
                    UnsafeRawPointer(buffer.baseAddress! + nameID).load(as: Unmanaged<_Channel>?.self)
                }
            }
            targets.every = state.every.map { Unmanaged.passUnretained($0) }
            if let sender, !state.bySender.isEmpty {
                let id = ObjectIdentifier(sender)
                if let (channel, identity) = state.borrowedSenderEntry(nameID, id, sender) {
                    targets.second = channel
                    targets.senderIdentity = identity
                }
                if state.everyBySenderCount > 0, let (channel, identity) = state.borrowedSenderEntry(nil, id, sender) {
                    targets.everyFromSender = channel
                    targets.senderIdentity = identity
                }
            }
        }
        if targets.first == nil {
            targets.first = targets.second
            targets.second = nil
        }
        if targets.every == nil {
            targets.every = targets.everyFromSender
            targets.everyFromSender = nil
        }
        return targets
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
        // Again with a new proxy if the listener's was retired meanwhile.
        while true {
            guard let proxy = _ListenerProxy.of(listener, create: true) else { return inert }
            let (channel, stale, probes) = state.withLock { $0.channelCreating(nameID, sender: sender, hub: self) }
            stale?.tearDown()
            sweepDeadSenders(probes)
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
            if !channel.add(relation) { relation.end() }
            return token
        }
    }

    /// Tears down the channels among `probes` whose sender died (probed
    /// unlocked: a liveness probe must not run under the lock).
    private func sweepDeadSenders(_ probes: [_Channel]) {
        for channel in probes where channel.object.isGone {
            if state.withLock({ $0.remove(senderChannel: channel) }) { channel.tearDown() }
        }
    }

    /// Each channel with its name's identity (`nil`: every name), for the
    /// graph of live relations.
    func _namedChannels() -> [(nameID: Int?, channel: _Channel)] {
        state.withLock { state in
            var channels: [(nameID: Int?, channel: _Channel)] = []
            for (nameID, channel) in state.unfiltered.enumerated() {
                if let channel { channels.append((nameID, channel)) }
            }
            if let every = state.every { channels.append((nil, every)) }
            for entry in state.senderChannels { channels.append((entry.nameID, entry.channel)) }
            return channels
        }
    }

    /// How many sender-filtered channels the hub holds (tests).
    var _senderChannelCount: Int {
        state.withLock { $0.senderChannels.count }
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
