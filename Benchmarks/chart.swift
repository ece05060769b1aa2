// Turns the output of ./instructions.sh into an SVG bar chart: one group per
// operation, SafeObserve beside each peer, instructions per operation on a
// log scale.
//
//   ./instructions.sh > results.txt
//   swift chart.swift results.txt "Measured 2026-11-24 on …" > instructions.svg
//
// The rows' operations and peers come from `InstructionCounts list` (the
// release build instructions.sh made), matched in order: run instructions.sh
// without a filter.

import Foundation

struct Row {
    let operation: String
    let peer: String
    let value: Double
}

func run(_ path: String, _ arguments: [String]) -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    try! process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}

let arguments = CommandLine.arguments
guard arguments.count >= 2 else {
    FileHandle.standardError.write(Data("usage: swift chart.swift results.txt [caption]\n".utf8))
    exit(2)
}
let caption = arguments.count >= 3 ? arguments[2] : ""
let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().path
let listing = run(directory + "/.build/release/InstructionCounts", ["list"])
let scenarios = listing.split(separator: "\n").map { $0.split(separator: "\t", omittingEmptySubsequences: false) }
let results = try! String(contentsOfFile: arguments[1], encoding: .utf8)
    .split(separator: "\n")
    .dropFirst()  // the header
    .prefix { !$0.trimmingCharacters(in: .whitespaces).isEmpty }  // the memory lines follow a blank line
    .compactMap { line in line.split(separator: " ").last.flatMap { Double($0) } }
guard results.count == scenarios.count else {
    FileHandle.standardError.write(
        Data("chart: \(results.count) results for \(scenarios.count) scenarios (run instructions.sh unfiltered)\n".utf8)
    )
    exit(1)
}
let rows = zip(scenarios, results).map { Row(operation: String($0.0[2]), peer: String($0.0[3]), value: $0.1) }

// Operations with SafeObserve and at least one other row, in report order.
var groups: [(operation: String, rows: [Row])] = []
for row in rows {
    if let index = groups.firstIndex(where: { $0.operation == row.operation }) {
        groups[index].rows.append(row)
    } else {
        groups.append((row.operation, [row]))
    }
}
groups = groups.filter { group in
    group.rows.count > 1 && group.rows.contains { $0.peer.hasPrefix("SafeObserve") }
        && group.rows.contains { !$0.peer.hasPrefix("SafeObserve") }
}

// Layout.
let labelWidth = 380.0
let plotWidth = 520.0
let valueWidth = 70.0
let barHeight = 14.0
let rowGap = 3.0
let groupGap = 12.0
let top = 74.0
let maximum = rows.map(\.value).max() ?? 1
let decades = max(1, Int(ceil(log10(maximum))))
func x(_ value: Double) -> Double {
    labelWidth + plotWidth * log10(max(value, 1)) / Double(decades)
}
func escaped(_ text: String) -> String {
    text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
        .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
}
func color(_ row: Row) -> String {
    if row.peer.hasPrefix("SafeObserve") { return "#d9480f" }
    if row.peer.contains("floor") || row.peer.hasPrefix("bound:") { return "#adb5bd" }
    return "#495057"
}

var body: [String] = []
var y = top
for group in groups {
    body.append(
        "<text x=\"8\" y=\"\(y + 11)\" font-weight=\"bold\" font-size=\"12\">\(escaped(group.operation))</text>")
    y += barHeight + rowGap
    for row in group.rows {
        body.append(
            "<text x=\"20\" y=\"\(y + 11)\" font-size=\"11\" fill=\"#343a40\">\(escaped(row.peer))</text>")
        body.append(
            "<rect x=\"\(labelWidth)\" y=\"\(y)\" width=\"\(max(1, x(row.value) - labelWidth))\" "
                + "height=\"\(barHeight)\" fill=\"\(color(row))\"/>")
        body.append(
            "<text x=\"\(x(row.value) + 4)\" y=\"\(y + 11)\" font-size=\"11\">"
                + "\(Int(row.value.rounded()).formatted())</text>")
        y += barHeight + rowGap
    }
    y += groupGap
}
let height = y + 10
var grid: [String] = []
for decade in 0...decades {
    let value = pow(10, Double(decade))
    let position = x(value)
    grid.append(
        "<line x1=\"\(position)\" y1=\"\(top - 6)\" x2=\"\(position)\" y2=\"\(height - 10)\" stroke=\"#dee2e6\"/>")
    grid.append(
        "<text x=\"\(position)\" y=\"\(top - 10)\" font-size=\"10\" text-anchor=\"middle\" fill=\"#868e96\">"
            + "\(Int(value).formatted())</text>")
}
let width = labelWidth + plotWidth + valueWidth
print(
    """
    <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" \
    viewBox="0 0 \(Int(width)) \(Int(height))" font-family="Helvetica, Arial, sans-serif">
    <rect width="100%" height="100%" fill="white"/>
    <text x="8" y="18" font-size="14" font-weight="bold">Instructions per operation (callgrind, log scale; fewer is better)</text>
    <text x="8" y="34" font-size="11" fill="#495057">\(escaped(caption))</text>
    <rect x="8" y="42" width="10" height="10" fill="#d9480f"/>\
    <text x="22" y="51" font-size="11">SafeObserve</text>
    <rect x="108" y="42" width="10" height="10" fill="#495057"/>\
    <text x="122" y="51" font-size="11">peer</text>
    <rect x="168" y="42" width="10" height="10" fill="#adb5bd"/>\
    <text x="182" y="51" font-size="11">floor (the bare mechanism) or bound (a target)</text>
    \((grid + body).joined(separator: "\n"))
    </svg>
    """)
