import Foundation
import OpenCombine
import SafeObserve

// MARK: - Cell reuse (issue 33)

/// A list row's model: two properties and an owner whose name the row shows.
public final class CellModel: SafeObservable {
    /// The row's title.
    @Observed public var title = ""
    /// A count the row shows.
    @Observed public var count = 0
    /// The owner, whose name the row shows (`\.owner?.name`).
    @Observed public var owner: CellOwner? = CellOwner()
    /// Creates a model.
    public init() {}
}

/// A row model's owner.
public final class CellOwner: SafeObservable {
    /// The owner's name.
    @Observed public var name = ""
    /// Creates an owner.
    public init() {}
}

/// The same row model for NotificationCenter: it posts its own changes.
final class PostingCellModel {
    let owner = PostingCellOwner()
}

/// The owner of a ``PostingCellModel``.
final class PostingCellOwner {}

/// The same row model for OpenCombine: a subject per property.
final class SubjectCellModel {
    let title = CurrentValueSubject<String, Never>("")
    let count = CurrentValueSubject<Int, Never>(0)
    let owner = CurrentValueSubject<SubjectCellOwner?, Never>(SubjectCellOwner())
}

/// The owner of a ``SubjectCellModel``.
final class SubjectCellOwner {
    let name = CurrentValueSubject<String, Never>("")
}

private let titleChanged = Notification.Name("CellModel.titleChanged")
private let countChanged = Notification.Name("CellModel.countChanged")
private let nameChanged = Notification.Name("CellOwner.nameChanged")

extension Scenarios {
    /// How many cells and models the reuse rows cycle through: each cell
    /// shows a model no other cell shows.
    static let cellCount = 4
    static let cellModelCount = 16

    // The pattern of a list UI: a cell that scrolls out is reused for another
    // row, so its listener stops observing the old model and observes the
    // new one, on three key paths, one of them a chain. One operation is one
    // reuse (three relations ended, three made).
    static let cellReuse: [Scenario] = [
        Scenario(operation: "cell reuse: 3 key paths, one a chain", peer: "SafeObserve", operationsPerIteration: 1) {
            n in
            let models = (0..<cellModelCount).map { _ in CellModel() }
            let cells = (0..<cellCount).map { _ in Sink() }
            var shown = Array(models.prefix(cellCount))
            func show(_ model: CellModel, in cell: Sink) {
                model.safeObserve(\.title, by: cell) { cell, _, change in cell.add(change.newValue!.count) }
                model.safeObserve(\.count, by: cell) { cell, _, change in cell.add(change.newValue!) }
                model.safeObserve(\.owner?.name, by: cell) { cell, _, change in cell.add(change.newValue!?.count ?? 0) }
            }
            for (cell, model) in zip(cells, shown) { show(model, in: cell) }
            measure(n) { n in
                for i in 0..<n {
                    let slot = i % cellCount
                    let model = models[(i + cellCount) % cellModelCount]
                    shown[slot].safeUnobserve(by: cells[slot])
                    show(model, in: cells[slot])
                    shown[slot] = model
                }
            }
            blackHole((models, cells))
        },
        Scenario(
            operation: "cell reuse: 3 key paths, one a chain",
            peer: "NotificationCenter (block; owner not re-targeted)", operationsPerIteration: 1
        ) { n in
            let center = NotificationCenter()
            let models = (0..<cellModelCount).map { _ in PostingCellModel() }
            let cells = (0..<cellCount).map { _ in Sink() }
            func show(_ model: PostingCellModel, in cell: Sink) -> [NSObjectProtocol] {
                [
                    center.addObserver(forName: titleChanged, object: model, queue: nil) { _ in cell.add(1) },
                    center.addObserver(forName: countChanged, object: model, queue: nil) { _ in cell.add(1) },
                    center.addObserver(forName: nameChanged, object: model.owner, queue: nil) { _ in cell.add(1) },
                ]
            }
            var tokens = (0..<cellCount).map { show(models[$0], in: cells[$0]) }
            measure(n) { n in
                for i in 0..<n {
                    let slot = i % cellCount
                    for token in tokens[slot] { center.removeObserver(token) }
                    tokens[slot] = show(models[(i + cellCount) % cellModelCount], in: cells[slot])
                }
            }
            for token in tokens.joined() { center.removeObserver(token) }
            blackHole((models, cells))
        },
        Scenario(
            operation: "cell reuse: 3 key paths, one a chain", peer: "OpenCombine sink (switchToLatest)",
            operationsPerIteration: 1
        ) { n in
            let models = (0..<cellModelCount).map { _ in SubjectCellModel() }
            let cells = (0..<cellCount).map { _ in Sink() }
            func show(_ model: SubjectCellModel, in cell: Sink) -> [AnyCancellable] {
                [
                    model.title.sink { cell.add($0.count) },
                    model.count.sink { cell.add($0) },
                    model.owner.map { $0?.name.eraseToAnyPublisher() ?? Just("").eraseToAnyPublisher() }
                        .switchToLatest().sink { cell.add($0.count) },
                ]
            }
            var cancellables = (0..<cellCount).map { show(models[$0], in: cells[$0]) }
            measure(n) { n in
                for i in 0..<n {
                    let slot = i % cellCount
                    for cancellable in cancellables[slot] { cancellable.cancel() }
                    cancellables[slot] = show(models[(i + cellCount) % cellModelCount], in: cells[slot])
                }
            }
            blackHole((models, cells, cancellables))
        },
    ]
}
