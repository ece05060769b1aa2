/// Finishes the notification sequences filtered on a plain sender soon
/// after the sender dies.
///
/// A sender that adopts ``SafeObserver`` finishes its sequences inside its
/// own `deinit` (a finalizer on its proxy). Any other class has no such
/// hook, so its death must be noticed: while at least one sequence filtered
/// on such a sender exists, a task probes the watched senders every
/// ``interval`` and finishes the sequences of those that died. The task
/// ends at its first probe that finds nothing left to watch, so a process
/// with no such sequence runs nothing and holds nothing here.
enum _SenderWatch {
    /// How often the task probes the watched senders. A sequence finishes
    /// within this interval of its sender's death, plus the time the task
    /// waits for a thread (the documentation promises half a second).
    static let interval = Duration.milliseconds(250)

    private static let state = _Mutex(State())

    /// Watches `sender` (a plain class, which the caller holds) until
    /// ``unwatch(_:id:)``: `finish` runs once the sender is found dead.
    /// Returns the watch's identity.
    ///
    /// - Complexity: Amortized O(1) expected.
    static func watch(_ sender: AnyObject, finish: @escaping @Sendable () -> Void) -> Int {
        let outcome = state.withLock { $0.watch(sender, finish: finish) }
        for finish in outcome.finishesNow { finish() }
        if outcome.startsTask {
            Task.detached(priority: .utility) { await run() }
        }
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

    /// The watching task: probes, unlocked, every ``interval``; ends when
    /// nothing is left to watch.
    ///
    /// - Complexity: O(*s*) per probe in the watched senders.
    private static func run() async {
        while true {
            // Never cancelled; a sleep that throws just probes sooner.
            try? await Task.sleep(for: interval)
            let dead = state.withLock { $0.senders() }.filter(\.reference.isGone)
            let (finishes, stops) = state.withLock { $0.forget(dead: dead) }
            for finish in finishes { finish() }
            if stops { return }
        }
    }

    /// Whether the task runs, and how many senders are watched (tests).
    static var _status: (isRunning: Bool, senders: Int) {
        state.withLock { ($0.isRunning, $0.watched.count) }
    }

    /// How many sequences watch `sender` (tests).
    static func _count(of sender: AnyObject) -> Int {
        state.withLock { $0.watched[ObjectIdentifier(sender)]?.finishes.count ?? 0 }
    }
}
