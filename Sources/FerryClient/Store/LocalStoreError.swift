/// Why the local store refused a call.
public enum LocalStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No synced table has this name (the schema has not listed it).
    case unknownTable(String)
    /// The table's strategy takes no writes from clients (`readonly`, `shared`).
    case readOnlyTable(String)
    /// A key column is missing from the row or key.
    case missingKey(table: String, column: String)
    /// A write the local store cannot make (a column it does not have, a local constraint).
    case invalidRow(String)

    /// A description for logs and for people.
    public var description: String {
        switch self {
        case .unknownTable(let table): "no synced table named \(table)"
        case .readOnlyTable(let table): "\(table) is read-only for clients"
        case .missingKey(let table, let column): "the key of \(table) needs \(column)"
        case .invalidRow(let message): message
        }
    }
}
