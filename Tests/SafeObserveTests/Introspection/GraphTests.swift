import Dispatch
import Testing

@testable import SafeObserve

extension NotificationName where Payload == Int {
    fileprivate static let graphPing = NotificationName("graph.ping")
}

@Suite("SafeObservation.graph")
struct GraphTests {
    /// Nodes and edges of a DOT text, parsed back.
    private struct Parsed {
        var nodes: [String: (label: String, shape: String)] = [:]
        var edges: [(from: String, to: String, label: String)] = []

        init(_ dot: String) {
            for rawLine in dot.split(separator: "\n") {
                let line = String(rawLine.drop { $0 == " " })
                guard line.hasPrefix("n"), line.dropFirst().first?.isNumber == true, line.hasSuffix("];") else {
                    continue
                }
                let label = Parsed.attribute("label", in: line)
                let words = line.split(separator: " ")
                if words.count > 2, words[1] == "->" {
                    edges.append((String(words[0]), String(words[2]), label))
                } else {
                    nodes[String(words[0])] = (label, Parsed.value(after: "shape=", in: line))
                }
            }
        }

        /// The quoted value of `name`, escapes kept.
        static func attribute(_ name: String, in line: String) -> String {
            let rest = value(after: "\(name)=\"", in: line, raw: true)
            var result = ""
            var escaping = false
            for character in rest {
                if escaping {
                    result.append(character)
                    escaping = false
                } else if character == "\\" {
                    result.append(character)
                    escaping = true
                } else if character == "\"" {
                    break
                } else {
                    result.append(character)
                }
            }
            return result
        }

        /// What follows `marker` in `line`, up to `]` (or all of it, `raw`).
        static func value(after marker: String, in line: String, raw: Bool = false) -> String {
            let characters = Array(line)
            let target = Array(marker)
            guard characters.count >= target.count else { return "" }
            for start in 0...(characters.count - target.count)
            where Array(characters[start..<start + target.count]) == target {
                let rest = characters[(start + target.count)...]
                return raw ? String(rest) : String(rest.prefix { $0 != "]" && $0 != "," })
            }
            return ""
        }
    }

    @Test func theGraphOfAKnownSetOfRelations_hasItsNodesAndEdges_andIsStable() {
        let first = Counter()
        let second = Counter()
        let person = Person()
        let plain = Listener()
        let optIn = OptInListener()
        let hub = NotificationHub()
        let subscriber = Listener()
        first.safeObserve(\.count, by: plain) { _, _, _ in }
        first.safeObserve(\.title, by: optIn, options: [.new, .old]) { _, _, _ in }
        second.safeObserve(\.count, by: optIn) { _, _, _ in }
        person.safeObserve(\.account.balance, by: plain) { _, _, _ in }
        hub.observe(.graphPing, by: subscriber, isolation: nil) { _, _ in }
        hub.observe(.graphPing, from: first, by: plain, isolation: nil) { _, _ in }

        let roots: [AnyObject] = [first, second, person, plain, optIn, subscriber]
        let dot = SafeObservation.graph(of: roots)
        let parsed = Parsed(dot)
        #expect(dot.hasPrefix("digraph SafeObserve {"))
        #expect(parsed.edges.count == 6, "\(dot)")
        #expect(parsed.nodes.count == 7, "\(dot)")  // 2 counters, a person, a hub, 3 listeners
        #expect(parsed.nodes.values.filter { $0.shape == "box" }.count == 3)
        #expect(parsed.nodes.values.filter { $0.shape == "cylinder" }.map(\.label) == ["NotificationHub"])
        let labels = Set(parsed.edges.map(\.label))
        #expect(labels.contains { $0.contains("graph.ping") })
        #expect(labels.contains { $0.hasSuffix("[.new, .old]") })
        // (Key paths through property wrappers print as `<computed …>` on Linux.)
        let personNode = parsed.nodes.first { $0.value.label == "Person" }?.key
        #expect(parsed.edges.filter { $0.to == personNode }.count == 1, "the derived key path is one edge to its root")
        #expect(SafeObservation.graph(of: roots) == dot, "the same relations give the same text")
        withExtendedLifetime((first, second, person, plain, optIn, hub, subscriber)) {}
    }

    /// In a process of its own: drawing the whole process's graph holds
    /// every live listener and observed object of the process for a moment,
    /// which would delay the deinits that suites running in parallel check
    /// for (a stress suite's leak check saw all five of its listeners alive).
    @Test func everyLiveRelation_isInTheWholeGraph_andEndedOnesAreNot() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            let counter = Counter()
            let listener = Listener()
            let token = counter.safeObserve(\.count, by: listener) { _, _, _ in }
            let whole = Parsed(SafeObservation.graph())
            expectInChild(whole.edges.contains { $0.label.contains("count") }, "a live relation is not in the graph")
            token.invalidate()
            let after = Parsed(SafeObservation.graph())
            expectInChild(!after.edges.contains { $0.label.contains("count") }, "an ended relation is in the graph")
            withExtendedLifetime((counter, listener)) {}
        }
        #expect(result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } == "")
    }

    /// In a process of its own (it draws the whole process's graph): the
    /// objects a graph describes are not kept alive while it is built. A
    /// picture of 5,000 relations takes a good part of a second in a debug
    /// build; the observed objects dropped meanwhile die at once.
    @Test func objectsDroppedWhileTheGraphIsBuilt_dieAtOnce() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            let lifetimes = LifetimeCounter()
            let listener = Listener()
            var counters: [Counter]? = (0..<5_000).map { _ in Counter(lifetime: lifetimes) }
            for counter in counters! { counter.safeObserve(\.count, by: listener) { _, _, _ in } }
            let started = DispatchSemaphore(value: 0)
            let finished = DispatchSemaphore(value: 0)
            DispatchQueue.global().async {
                started.signal()
                _ = SafeObservation.graph()
                finished.signal()
            }
            started.wait()
            // Well inside the picture: collecting the edges alone takes
            // longer.
            _ = DispatchSemaphore(value: 0).wait(timeout: .now() + .milliseconds(50))
            counters = nil
            let dead = lifetimes.deinitCount
            finished.wait()
            // One may be the object whose relations it is reading.
            expectInChild(dead >= 4_999, "the graph kept \(5_000 - dead) of 5,000 objects alive while it ran")
            withExtendedLifetime(listener) {}
        }
        #expect(result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } == "")
    }

    @Test func theGraphOfAnObject_listsItsLiveRelations_andNotEndedOnes() {
        let counter = Counter()
        let listener = Listener()
        let token = counter.safeObserve(\.count, by: listener) { _, _, _ in }
        #expect(Parsed(SafeObservation.graph(of: [counter])).edges.count == 1)
        token.invalidate()
        #expect(Parsed(SafeObservation.graph(of: [counter])).edges.isEmpty)
        withExtendedLifetime(listener) {}
    }

    @Test func labelsAreEscaped() {
        final class Quoted {}
        let hub = NotificationHub()
        let listener = Quoted()
        hub.observe(NotificationName<Int>("say \"hi\"\\now"), by: listener, isolation: nil) { _, _ in }
        let dot = SafeObservation.graph(of: [listener])
        #expect(dot.contains(#"[label="notification \"say \"hi\"\\now\""];"#), "\(dot)")
    }
}
