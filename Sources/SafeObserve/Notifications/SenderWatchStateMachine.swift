extension _SenderWatch {
    /// The watched senders and whether the watching thread runs. Its
    /// transitions never release a value or run an action under the lock:
    /// what they remove is returned.
    struct State {
        /// The sequences watching one sender.
        struct Watched {
            /// The sender, never retained.
            let reference: _UnretainedReference
            /// The identity of the watch that filed the entry: tells this
            /// entry from one filed later for another sender at a reused
            /// address (portable probes).
            let generation: Int
            /// What finishes each sequence, by the watch's identity.
            var finishes: [Int: @Sendable () -> Void] = [:]
        }

        /// The watched senders, by identity.
        var watched: [ObjectIdentifier: Watched] = [:]
        /// Identities of watches, increasing.
        var lastID = 0
        /// Whether a thread is watching (or about to).
        var isRunning = false

        /// What to do after unlocking, once a sender is watched.
        struct WatchOutcome {
            /// The watch's identity, for ``unwatch(_:id:)``.
            var id: Int
            /// Start the watching thread.
            var startsThread = false
            /// What finishes the sequences of a dead sender that was
            /// watched at `sender`'s address (portable probes only: the
            /// native ones keep a watched sender's address from reuse).
            var finishesNow: [@Sendable () -> Void] = []
        }

        /// Watches `sender` (which the caller holds) for the sequence that
        /// `finish` finishes.
        ///
        /// - Complexity: Amortized O(1) expected.
        mutating func watch(_ sender: AnyObject, finish: @escaping @Sendable () -> Void) -> WatchOutcome {
            lastID += 1
            var outcome = WatchOutcome(id: lastID)
            let key = ObjectIdentifier(sender)
            if let entry = watched[key], !entry.reference.refers(to: sender) {
                outcome.finishesNow = Self.inOrder(entry.finishes)
                watched[key] = nil
            }
            watched[key, default: Watched(reference: _UnretainedReference(sender), generation: lastID)]
                .finishes[lastID] = finish
            if !isRunning {
                isRunning = true
                outcome.startsThread = true
            }
            _checkInvariants()
            return outcome
        }

        /// Stops the watch `id` of the sender `key`; returns its action (to
        /// release unlocked), if it was still watched.
        ///
        /// - Complexity: O(1) expected: the sender's watches are changed in place.
        mutating func unwatch(_ key: ObjectIdentifier, id: Int) -> (@Sendable () -> Void)? {
            guard let removed = watched[key]?.finishes.removeValue(forKey: id) else { return nil }
            if watched[key]?.finishes.isEmpty == true { watched[key] = nil }
            _checkInvariants()
            return removed
        }

        /// The watched senders, to probe unlocked.
        ///
        /// - Complexity: O(*s*) in the watched senders.
        func senders() -> [Probe] {
            watched.map { Probe(key: $0.key, generation: $0.value.generation, reference: $0.value.reference) }
        }

        /// A watched sender, to probe unlocked.
        struct Probe {
            let key: ObjectIdentifier
            let generation: Int
            let reference: _UnretainedReference
        }

        /// Forgets the senders found dead; returns what finishes their
        /// sequences, and whether the thread ends (nothing left to watch: a
        /// later watch starts another).
        ///
        /// - Complexity: O(*d* + *f* log *f*) in the dead senders and their
        ///   sequences.
        mutating func forget(dead: [Probe]) -> (finishes: [@Sendable () -> Void], stops: Bool) {
            var finishes: [@Sendable () -> Void] = []
            for probe in dead {
                // The entry probed, not one filed since for another sender
                // at a reused address (portable probes).
                guard let entry = watched[probe.key], entry.generation == probe.generation else { continue }
                finishes += Self.inOrder(entry.finishes)
                watched[probe.key] = nil
            }
            let stops = watched.isEmpty
            if stops { isRunning = false }
            _checkInvariants()
            return (finishes, stops)
        }

        /// `finishes` in the order the watches were made.
        private static func inOrder(_ finishes: [Int: @Sendable () -> Void]) -> [@Sendable () -> Void] {
            finishes.sorted { $0.key < $1.key }.map(\.value)
        }

        /// A watched sender always has a thread coming for it, and no entry
        /// is empty (under `SAFEOBSERVE_INTERNAL_CHECKS`, after each
        /// transition).
        func _checkInvariants() {
            #if SAFEOBSERVE_INTERNAL_CHECKS
                precondition(watched.isEmpty || isRunning, "_SenderWatch: senders watched and no thread")
                precondition(!watched.values.contains { $0.finishes.isEmpty }, "_SenderWatch: an empty entry")
            #endif
        }
    }
}
