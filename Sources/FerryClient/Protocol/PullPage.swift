/// One page of `GET /v1/pull`: `{"changes", "cursor", "has_more", "last_mutation_id"}`.
package struct PullPage: Sendable, Decodable, Equatable {
    /// One table's part of a page: the rows as they now stand, and the keys of those deleted.
    package struct TableChanges: Sendable, Decodable, Equatable {
        package var upserts: [FerryRow] = []
        package var deletes: [FerryRow] = []

        package init(upserts: [FerryRow] = [], deletes: [FerryRow] = []) {
            self.upserts = upserts
            self.deletes = deletes
        }

        private enum CodingKeys: String, CodingKey { case upserts, deletes }

        package init(from decoder: any Decoder) throws {
            if let value = WireDecoder.value(of: decoder), case .object(let object) = value,
                object["upserts"]?.arrayValue?.allSatisfy({ $0.objectValue != nil }) ?? true,
                object["deletes"]?.arrayValue?.allSatisfy({ $0.objectValue != nil }) ?? true
            {
                // The rows as parsed (a thousand a page): no container call per column.
                upserts = object["upserts"]?.arrayValue?.compactMap(\.objectValue) ?? []
                deletes = object["deletes"]?.arrayValue?.compactMap(\.objectValue) ?? []
                return
            }
            let container = try decoder.container(keyedBy: CodingKeys.self)
            upserts = try container.decodeIfPresent([FerryRow].self, forKey: .upserts) ?? []
            deletes = try container.decodeIfPresent([FerryRow].self, forKey: .deletes) ?? []
        }
    }

    /// The tables that changed since the cursor (tables without changes are left out).
    package var changes: [String: TableChanges]
    /// The cursor to pull from next.
    package var cursor: String
    /// Whether to pull again at once with ``cursor``.
    package var hasMore: Bool
    /// The highest mutation of this device the page's data already contains.
    package var lastMutationID: Int64

    package init(changes: [String: TableChanges], cursor: String, hasMore: Bool, lastMutationID: Int64) {
        self.changes = changes
        self.cursor = cursor
        self.hasMore = hasMore
        self.lastMutationID = lastMutationID
    }

    private enum CodingKeys: String, CodingKey {
        case changes, cursor
        case hasMore = "has_more"
        case lastMutationID = "last_mutation_id"
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        changes = try container.decodeIfPresent([String: TableChanges].self, forKey: .changes) ?? [:]
        cursor = try container.decode(String.self, forKey: .cursor)
        hasMore = try container.decode(Bool.self, forKey: .hasMore)
        lastMutationID = try container.decodeIfPresent(Int64.self, forKey: .lastMutationID) ?? 0
    }

    /// The page in a pull answer's JSON; throws when it has not the protocol's shape.
    package init(json: JSONValue) throws {
        self = try WireDecoder.decode(PullPage.self, from: json)
    }
}
