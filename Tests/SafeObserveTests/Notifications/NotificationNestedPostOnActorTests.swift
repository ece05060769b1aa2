import Dispatch
import Testing

@testable import SafeObserve

// A post made on an actor from inside a handler isolated to it, while posts
// made elsewhere wait for that actor (issue 32, D3). Notifications.md: "A
// post made from inside a handler is delivered at once, to every observer,
// before the outer post goes on to the observers after the current one".
// The baseline is the same post made on the actor, where every delivery is
// synchronous: `A:1, A:100, B:100, B:1`.
//
// No wall-clock assertion: the actor is kept busy by its own job while the
// posts are made from a thread of their own, and every wait is a poll with
// a deadline.

extension NotificationName where Payload == Int {
    fileprivate static let nested = NotificationName("NotificationNestedPostOnActorTests.nested")
}

/// What the handlers were told, in order, each entry marked when it was
/// told inside a handler of the same observer (a re-entered handler).
private final class NestingLog: Sendable {
    private let state = _Mutex<(entries: [String], running: Set<String>)>(([], []))

    /// `observer` is told `payload`; returns whether its handler was
    /// running already (re-entered).
    func enter(_ observer: String, _ payload: Int) -> Bool {
        state.withLock { state in
            let reentered = !state.running.insert(observer).inserted
            state.entries.append("\(observer):\(payload)" + (reentered ? " inside \(observer)" : ""))
            return reentered
        }
    }

    /// `observer`'s handler returns (told `reentered` by ``enter(_:_:)``).
    func leave(_ observer: String, reentered: Bool) {
        guard !reentered else { return }
        _ = state.withLock { $0.running.remove(observer) }
    }

    var entries: [String] { state.withLock { $0.entries } }
}

/// Posts `payloads` from a thread of its own, and waits for it: called on
/// an actor, the posts are made elsewhere and wait for the caller's job to
/// end (the thread needs nothing from the cooperative pool).
private func postElsewhere(_ hub: NotificationHub, _ payloads: [Int]) {
    let done = DispatchSemaphore(value: 0)
    _detachThread {
        for payload in payloads { hub.post(.nested, payload: payload) }
        done.signal()
    }
    done.wait()
}

/// Registers observers A then B from `isolation` (their handlers are
/// isolated to it); A posts 100 on the actor when told `trigger`, after
/// running `beforeNestedPost`.
private func observeAAndB(
    _ hub: NotificationHub, _ log: NestingLog, listeners: [Peer], trigger: Int,
    beforeNestedPost: @escaping @Sendable () -> Void = {}, isolation: isolated any Actor
) {
    hub.observe(.nested, by: listeners[0]) { _, notification in
        let reentered = log.enter("A", notification.payload)
        if notification.payload == trigger {
            beforeNestedPost()
            hub.post(.nested, payload: 100)
        }
        log.leave("A", reentered: reentered)
    }
    hub.observe(.nested, by: listeners[1]) { _, notification in
        let reentered = log.enter("B", notification.payload)
        log.leave("B", reentered: reentered)
    }
}

@globalActor
private actor NestedPostGlobalActor {
    static let shared = NestedPostGlobalActor()
}

private actor NestedPostActor {}

/// The kinds of actor a handler can be isolated to.
enum NestedPostActorKind: CaseIterable, Sendable {
    case mainActor, defaultActor, globalActor, customExecutor
}

@Suite("A post made on an actor from inside a handler, while posts wait for the actor")
struct NotificationNestedPostOnActorTests {
    /// The actor of `kind`, kept alive by the caller.
    private static func actor(of kind: NestedPostActorKind) -> any Actor {
        switch kind {
        case .mainActor: MainActor.shared
        case .defaultActor: NestedPostActor()
        case .globalActor: NestedPostGlobalActor.shared
        case .customExecutor: ExecutorActor()
        }
    }

    /// Registers A and B on `actor`, then, still on it, posts `payloads`
    /// elsewhere (they wait for the actor) and `onActor` there.
    private static func run(
        on actor: isolated any Actor, _ hub: NotificationHub, _ log: NestingLog, listeners: [Peer], trigger: Int,
        postedElsewhere payloads: [Int], postedOnActor onActor: Int? = nil,
        beforeNestedPost: @escaping @Sendable () -> Void = {}
    ) {
        observeAAndB(
            hub, log, listeners: listeners, trigger: trigger, beforeNestedPost: beforeNestedPost, isolation: actor)
        postElsewhere(hub, payloads)
        if let onActor { hub.post(.nested, payload: onActor) }
    }

    /// Posts 1, 2 and 3 made elsewhere wait for the actor; A's handler,
    /// told 1, posts 100 on the actor. The nested post reaches A (inside
    /// its handler of 1, as in the baseline) and B before the outer post 1
    /// goes on to B, and A's handler is never re-entered with the queued
    /// post 2.
    @Test(arguments: NestedPostActorKind.allCases)
    func aPostMadeByAHandlerOfAQueuedPost_reachesEveryObserverAtOnce_andNoHandlerIsReenteredWithAQueuedPost(
        kind: NestedPostActorKind
    ) async {
        let actor = Self.actor(of: kind)
        let hub = NotificationHub()
        let log = NestingLog()
        let listeners = [Peer(), Peer()]
        await Self.run(on: actor, hub, log, listeners: listeners, trigger: 1, postedElsewhere: [1, 2, 3])
        #expect(await eventually { log.entries.count >= 8 })
        #expect(
            log.entries == ["A:1", "A:100 inside A", "B:100", "B:1", "A:2", "B:2", "A:3", "B:3"],
            "\(kind): \(log.entries)")
        withExtendedLifetime((actor, listeners)) {}
    }

    /// A post made on the actor outside any handler is delivered to each
    /// observer after the posts it still has queued (as a change made on the
    /// actor is). A post that A's handler makes while told one of those
    /// queued posts is nested in it: at once, to every observer, and A is
    /// not re-entered with its next queued post.
    @Test(arguments: NestedPostActorKind.allCases)
    func aPostMadeOnTheActor_followsWhatEachObserverHasQueued_andOneNestedInThoseDeliveriesGoesAtOnce(
        kind: NestedPostActorKind
    ) async {
        let actor = Self.actor(of: kind)
        let hub = NotificationHub()
        let log = NestingLog()
        let listeners = [Peer(), Peer()]
        await Self.run(
            on: actor, hub, log, listeners: listeners, trigger: 1, postedElsewhere: [1, 2], postedOnActor: 3)
        #expect(
            log.entries == ["A:1", "A:100 inside A", "B:100", "A:2", "A:3", "B:1", "B:2", "B:3"],
            "\(kind): \(log.entries)")
        #expect(await eventually { log.entries.count >= 8 })
        #expect(log.entries.count == 8, "\(kind): \(log.entries)")
        withExtendedLifetime((actor, listeners)) {}
    }

    /// A's handler, told a post made on the actor (3), has a post made
    /// elsewhere meanwhile (7), which waits for the actor, then posts 100
    /// there: 100 goes at once to A and B, before 3 goes on to B, and A is
    /// not re-entered with 7, which the actor's job delivers afterwards. B,
    /// told 3 outside any handler, is told first what it has queued then
    /// (7), as any observer of a post made on the actor is.
    @Test(arguments: NestedPostActorKind.allCases)
    func aHandlerOfAPostMadeOnTheActor_isNotReenteredWithAPostQueuedWhileItRuns(kind: NestedPostActorKind) async {
        let actor = Self.actor(of: kind)
        let hub = NotificationHub()
        let log = NestingLog()
        let listeners = [Peer(), Peer()]
        await Self.run(
            on: actor, hub, log, listeners: listeners, trigger: 3, postedElsewhere: [], postedOnActor: 3,
            beforeNestedPost: { postElsewhere(hub, [7]) })
        #expect(await eventually { log.entries.count >= 6 })
        #expect(
            log.entries == ["A:3", "A:100 inside A", "B:100", "B:7", "B:3", "A:7"], "\(kind): \(log.entries)")
        withExtendedLifetime((actor, listeners)) {}
    }
}
