import Foundation

/// A synced table as `GET /v1/schema` describes it: what the local store mirrors.
public struct TableSchema: Sendable, Hashable, Codable {
    /// How the server merges writes to a table (docs/TABLES.md).
    public enum Strategy: String, Sendable, Hashable, Codable {
        /// Last write wins, by server commit; deletes leave tombstones.
        case lww
        /// A record never changes: the same row again is a no-op, a different one is refused.
        case insertOnly = "insert_only"
        /// Membership: inserts and deletes, a repeat is a no-op.
        case set
        /// One device at a time writes the row, the one holding its lock (``FerryClient/claimLock(table:key:force:)``).
        case deviceLock = "device_lock"
        /// Read by its owner, written by the operator only.
        case readonly
        /// Read by every user, written by the operator only.
        case shared

        /// Whether clients may push to tables of this strategy.
        public var isWritable: Bool { self != .readonly && self != .shared }
    }

    /// A column and its PostgreSQL type (`format_type`), e.g. `text`, `integer`, `jsonb`, `text[]`.
    public struct Column: Sendable, Hashable, Codable {
        /// The column's name, as rows name it.
        public var name: String
        /// The PostgreSQL type, as `format_type` writes it.
        public var type: String {
            didSet { kind = ColumnKind(postgresType: type) }
        }
        /// The server's default for the column when it is a constant (`''`, `0`, `'{}'`),
        /// which a new local row shows until the server's version arrives; nil when the
        /// column has none, or one only the server can compute (`now()`, a sequence).
        public var defaultValue: JSONValue?

        /// How the local store keeps this column's values: read from `type` once, as every
        /// local write and read asks for it.
        private(set) var kind: ColumnKind

        /// A column named `name` of PostgreSQL type `type`, with the server's constant
        /// default, if any.
        public init(name: String, type: String, defaultValue: JSONValue? = nil) {
            self.name = name
            self.type = type
            self.defaultValue = defaultValue
            kind = ColumnKind(postgresType: type)
        }

        private enum CodingKeys: String, CodingKey {
            case name, type
            case defaultValue = "default"
        }

        /// Reads a column of `GET /v1/schema` (or of the store's copy of it).
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                name: try container.decode(String.self, forKey: .name),
                type: try container.decode(String.self, forKey: .type),
                defaultValue: try container.decodeIfPresent(JSONValue.self, forKey: .defaultValue))
        }

        /// Writes the column as `GET /v1/schema` does.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(name, forKey: .name)
            try container.encode(type, forKey: .type)
            try container.encodeIfPresent(defaultValue, forKey: .defaultValue)
        }
    }

    /// The bare table name, as push and pull name it.
    public var name: String
    /// The strategy it was registered with.
    public var strategy: Strategy
    /// The primary key's columns.
    public var key: [String]
    /// The owner column (`user_id` in the examples), nil for a `shared` table.
    public var owner: String?
    /// Every column a client sees, in table order (`updated_at` among them).
    public var columns: [Column]

    /// The column named `name`.
    func column(_ name: String) -> Column? { columns.first { $0.name == name } }
}

/// How a column's values are stored in SQLite and read back as JSON.
enum ColumnKind: Sendable, Hashable {
    /// `smallint`, `integer`, `bigint`: SQLite INTEGER.
    case integer
    /// `real`, `double precision`, `numeric`: SQLite REAL.
    case real
    /// `boolean`: SQLite INTEGER 0 or 1.
    case boolean
    /// `json`, `jsonb` and arrays: the JSON text, read back as JSON.
    case json
    /// Everything else (text, uuid, dates and times as RFC 3339 text): SQLite TEXT.
    case text

    init(postgresType: String) {
        let type = postgresType.lowercased()
        if type.hasSuffix("[]") || type == "json" || type == "jsonb" {
            self = .json
        } else if ["smallint", "integer", "bigint"].contains(type) {
            self = .integer
        } else if type == "real" || type == "double precision" || type.hasPrefix("numeric") {
            self = .real
        } else if type == "boolean" {
            self = .boolean
        } else {
            self = .text
        }
    }

    /// The SQLite type a local column is declared with (its affinity).
    var declaration: String {
        switch self {
        case .integer, .boolean: "INTEGER"
        case .real: "REAL"
        case .json, .text: "TEXT"
        }
    }

    /// `value` as this column stores it.
    func sqlValue(_ value: JSONValue) -> SQLValue {
        switch (self, value) {
        case (_, .null): .null
        case (.json, _): .text(value.jsonText)
        case (.integer, .integer(let integer)): .integer(integer)
        case (.integer, .string(let string)): Int64(string).map(SQLValue.integer) ?? .text(string)
        case (.real, .integer(let integer)): .real(Double(integer))
        case (.real, .double(let double)), (.integer, .double(let double)): .real(double)
        case (.real, .string(let string)): Double(string).map(SQLValue.real) ?? .text(string)
        case (.boolean, .bool(let bool)): .integer(bool ? 1 : 0)
        case (_, .string(let string)): .text(string)
        case (_, .bool(let bool)): self == .text ? .text(bool ? "true" : "false") : .integer(bool ? 1 : 0)
        case (_, .integer(let integer)): self == .text ? .text(String(integer)) : .integer(integer)
        case (_, .double(let double)): self == .text ? .text(value.jsonText) : .real(double)
        case (_, .array), (_, .object): .text(value.jsonText)
        }
    }

    /// A stored value read back as JSON.
    func jsonValue(_ value: SQLValue) -> JSONValue {
        switch (self, value) {
        case (_, .null): .null
        case (.boolean, .integer(let integer)): .bool(integer != 0)
        case (.json, .text(let text)): (try? JSONValue(json: Data(text.utf8))) ?? .string(text)
        // (SQLite's RETURNING gives a REAL column's whole number as it was bound, an integer.)
        case (.real, .integer(let integer)): .double(Double(integer))
        case (_, .integer(let integer)): .integer(integer)
        case (_, .real(let real)): .double(real)
        case (_, .text(let text)): .string(text)
        case (_, .blob(let data)): .string(data.base64EncodedString())
        }
    }
}
