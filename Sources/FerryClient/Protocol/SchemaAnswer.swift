/// The answer to `GET /v1/schema`: `{"tables": [...]}`. A table this client cannot read
/// (a later protocol's strategy) is left out, not the whole schema.
struct SchemaAnswer: Sendable, Decodable {
    var tables: [TableSchema]

    private enum CodingKeys: String, CodingKey { case tables }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        tables = try container.decode([Readable].self, forKey: .tables).compactMap(\.table)
    }

    private struct Readable: Decodable {
        var table: TableSchema?
        init(from decoder: any Decoder) throws { table = try? TableSchema(from: decoder) }
    }
}
