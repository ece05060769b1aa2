extension SafeObservation {
    /// A Graphviz DOT description of live relations: every one in the
    /// process, or those whose listener or observed object is among `roots`.
    ///
    /// ```swift
    /// print(SafeObservation.graph())                     // everything
    /// print(SafeObservation.graph(of: [viewModel]))      // what the view model observes, and who observes it
    /// // Render with Graphviz: swift run MyApp | dot -Tsvg > relations.svg
    /// ```
    ///
    /// Nodes are objects, labelled with their type: observed objects as
    /// ellipses, notification hubs as cylinders, listeners as boxes. Each
    /// edge is one relation, from its listener to what it observes: a
    /// key-path relation is labelled with the key path and its options, a
    /// notification relation with the notification's name (to its hub, or to
    /// the sender it filters on). A derived key path (`\.account.balance`)
    /// is one edge to its root.
    ///
    /// The output is deterministic for a given set of live relations: edges
    /// are sorted, and nodes are numbered in the order the edges first name
    /// them. Relations of listeners that died and were not cleaned up yet are
    /// left out.
    ///
    /// It keeps no object alive: each relation's listener and observed
    /// object are held only while that relation is read, so an object whose
    /// last other reference is dropped meanwhile dies then, and its
    /// relations end as usual. A relation that ends while the picture is
    /// built may still be in it; nodes are told apart by identity, so an
    /// object made at the address of one that died meanwhile would share its
    /// node. Meant for debugging, not for hot paths.
    ///
    /// - Parameter roots: The objects whose relations to describe (as
    ///   listener or observed object); every live relation when `nil`.
    /// - Returns: A `digraph` in the DOT language.
    /// - Complexity: O(*n* log *n*) in the relations described, plus the
    ///   notification relations of every live hub (visited whatever the
    ///   roots), plus, with no roots, the observed properties of the process.
    public static func graph(of roots: [AnyObject]? = nil) -> String {
        var edges: [_GraphEdge] = []
        let rootIDs = roots.map { Set($0.map(ObjectIdentifier.init)) }
        func wanted(_ listener: AnyObject, _ target: AnyObject) -> Bool {
            guard let rootIDs else { return true }
            return rootIDs.contains(ObjectIdentifier(listener)) || rootIDs.contains(ObjectIdentifier(target))
        }

        // Key-path relations, from the observed properties' channels.
        let channels = roots.map { $0.flatMap { _channels(of: $0) } } ?? _SentinelIndex.allChannels()
        var seen = Set<ObjectIdentifier>()
        for channel in channels {
            guard let object = channel.object.load() else { continue }
            for relation in channel.liveRelations() {
                var listed = relation
                var root = object
                if relation.isDependency {
                    guard let derivation = relation.listener.load() as? _Derivation,
                        let derived = derivation.rootedRelation()
                    else { continue }
                    (listed, root) = derived
                }
                guard seen.insert(ObjectIdentifier(listed)).inserted,
                    let listener = listed.listener.load(), wanted(listener, root)
                else { continue }
                let keyPath = _GraphEdge.withoutAddresses(_KeyPathNames.describe(listed.keyPath))
                edges.append(
                    _GraphEdge(
                        listener: listener, target: root, targetKind: .object,
                        label: "\(keyPath) \(listed.options)"))
            }
        }

        // Notification relations, from the live hubs' channels.
        for hub in _NotificationHubs.all() {
            for (nameID, channel) in hub._namedChannels() {
                guard let target = channel.object.load() else { continue }
                let name = nameID.map { "\"\(_NotificationNames.rawValue(of: $0))\"" } ?? "every name"
                for relation in channel.liveRelations() {
                    guard let listener = relation.listener.load(), wanted(listener, target) else { continue }
                    edges.append(
                        _GraphEdge(
                            listener: listener, target: target, targetKind: target === hub ? .hub : .object,
                            label: "notification \(name)"))
                }
            }
        }
        return _GraphEdge.dot(edges.sorted())
    }
}

/// One relation of ``SafeObservation/graph(of:)``: its two ends by identity
/// and type name, not held (the picture keeps no object alive).
struct _GraphEdge: Comparable {
    enum TargetKind { case object, hub }

    /// One end of an edge.
    struct Node {
        let id: ObjectIdentifier
        let typeName: String

        init(_ object: AnyObject) {
            id = ObjectIdentifier(object)
            typeName = String(describing: type(of: object))
        }
    }

    let listener: Node
    let target: Node
    let targetKind: TargetKind
    let label: String

    init(listener: AnyObject, target: AnyObject, targetKind: TargetKind, label: String) {
        self.listener = Node(listener)
        self.target = Node(target)
        self.targetKind = targetKind
        self.label = label
    }

    private var key: (String, String, String, UInt, UInt) {
        (
            target.typeName, label, listener.typeName, UInt(bitPattern: target.id), UInt(bitPattern: listener.id)
        )
    }

    static func < (lhs: _GraphEdge, rhs: _GraphEdge) -> Bool { lhs.key < rhs.key }
    static func == (lhs: _GraphEdge, rhs: _GraphEdge) -> Bool { lhs.key == rhs.key }

    /// The DOT text of `edges`, nodes numbered in order of first mention.
    static func dot(_ edges: [_GraphEdge]) -> String {
        var numbers: [ObjectIdentifier: Int] = [:]
        var nodes: [String] = []
        func node(_ node: Node, shape: String) -> String {
            if let number = numbers[node.id] { return "n\(number)" }
            let number = numbers.count
            numbers[node.id] = number
            nodes.append("  n\(number) [label=\(quoted(node.typeName)), shape=\(shape)];")
            return "n\(number)"
        }
        var lines: [String] = []
        for edge in edges {
            let target = node(edge.target, shape: edge.targetKind == .hub ? "cylinder" : "ellipse")
            let listener = node(edge.listener, shape: "box")
            lines.append("  \(listener) -> \(target) [label=\(quoted(edge.label))];")
        }
        return
            ([
                "digraph SafeObserve {", "  rankdir=LR;", "  node [fontname=\"Helvetica\"];",
                "  edge [fontname=\"Helvetica\", fontsize=11];",
            ] + nodes + lines + ["}"])
            .joined(separator: "\n") + "\n"
    }

    /// `description` with each `<computed 0x… (Type)>` component (a key path
    /// through a property wrapper, as Swift prints it on Linux) shortened to
    /// `<computed Type>`: addresses would change the text from run to run.
    static func withoutAddresses(_ description: String) -> String {
        var result = ""
        var rest = Substring(description)
        while let start = rest.firstRange(of: "<computed 0x") {
            result += rest[..<start.lowerBound]
            let afterAddress = rest[start.upperBound...].drop { $0.isHexDigit }
            guard afterAddress.hasPrefix(" ("), let close = afterAddress.firstRange(of: ")>") else {
                result += rest[start.lowerBound...]
                return result
            }
            result +=
                "<computed " + afterAddress[afterAddress.index(afterAddress.startIndex, offsetBy: 2)..<close.lowerBound]
                + ">"
            rest = afterAddress[close.upperBound...]
        }
        return result + rest
    }

    /// `text` as a DOT string literal.
    private static func quoted(_ text: String) -> String {
        var escaped = ""
        for character in text {
            switch character {
            case "\"": escaped += "\\\""
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return "\"\(escaped)\""
    }
}
