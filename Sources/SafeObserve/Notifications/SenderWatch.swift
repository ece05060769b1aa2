/// Finishes the notification sequences filtered on a plain sender soon
/// after the sender dies, and ends the relations on an `@Observable` model
/// soon after the model dies when other registrars still hold its sentinel
/// (see ``_ModelSentinel``).
///
/// A sender that adopts ``SafeObserver`` finishes its sequences inside its
/// own `deinit` (a finalizer on its proxy). Any other class has no such
/// hook, so its death must be noticed: while at least one sequence filtered
/// on such a sender exists, a thread probes the watched senders every
/// ``interval`` and finishes the sequences of those that died. A thread of
/// its own, not a task: the program may keep the cooperative pool's
/// threads busy, and the bound must hold anyway. The thread ends at its
/// first probe that finds nothing left to watch, so a process with no such
/// sequence runs nothing and holds nothing here.
enum _SenderWatch {
    /// How often, in milliseconds, the thread probes the watched senders. A
    /// sequence finishes within this interval of its sender's death, plus
    /// the time the thread waits for a core (the documentation promises
    /// half a second).
    static let interval = 250

    private static let state = _Mutex(State())

    /// Watches `sender` (a plain class, which the caller holds) until
    /// ``unwatch(_:id:)``: `finish` runs once the sender is found dead.
    /// Returns the watch's identity.
    ///
    /// - Complexity: Amortized O(1) expected.
    static func watch(_ sender: AnyObject, finish: @escaping @Sendable () -> Void) -> Int {
        let outcome = state.withLock { $0.watch(sender, finish: finish) }
        for finish in outcome.finishesNow { finish() }
        if outcome.startsThread { _detachThread(run) }
        return outcome.id
    }

    /// Stops the watch `id` of the sender whose identity is `key`.
    /// Idempotent.
    ///
    /// - Complexity: O(1) expected.
    static func unwatch(_ key: ObjectIdentifier, id: Int) {
        let removed = state.withLock { $0.unwatch(key, id: id) }
        _ = removed  // released unlocked: its captures may be anything
    }

    /// The watching thread: probes, unlocked, every ``interval``; ends when
    /// nothing is left to watch.
    ///
    /// - Complexity: O(*s*) per probe in the watched senders.
    @Sendable
    private static func run() {
        while true {
            _sleep(milliseconds: interval)
            let dead = state.withLock { $0.senders() }.filter(\.reference.isGone)
            let (finishes, stops) = state.withLock { $0.forget(dead: dead) }
            for finish in finishes { finish() }
            if stops { return }
        }
    }

    /// Whether the thread runs, and how many senders are watched (tests).
    static var _status: (isRunning: Bool, senders: Int) {
        state.withLock { ($0.isRunning, $0.watched.count) }
    }

    /// How many sequences watch `sender` (tests).
    static func _count(of sender: AnyObject) -> Int {
        state.withLock { $0.watched[ObjectIdentifier(sender)]?.finishes.count ?? 0 }
    }
}
