import FerryHTTP
import FerryJSON
import Foundation

/// Request bodies: JSON, decoded with Foundation (they are small; PROTOCOL.md caps them).
enum RequestBody {
    /// The most arrays and objects a JSON body may nest, counting its outermost one;
    /// deeper is `400 invalid_json` (PROTOCOL.md's notes). It bounds the recursion of
    /// every parser after the check, PostgreSQL's included.
    static let maximumDepth = 128

    /// `400 invalid_json` for bytes that are not one JSON value, in UTF-8, nested at
    /// most ``maximumDepth`` deep; nil for good ones. Every JSON body goes through this
    /// first, so that no later reader (Foundation's, PostgreSQL's) decides alone.
    static func refusal(of bytes: [UInt8]) -> APIError? {
        let defect = bytes.withUnsafeBufferPointer { JSONObjectReader.defect(in: $0, maximumDepth: maximumDepth) }
        switch defect {
        case nil: return nil
        case .notUTF8: return .invalidJSON("the body is not valid JSON: a string is not UTF-8")
        case .tooDeep:
            return .invalidJSON("the body nests arrays and objects more than \(maximumDepth) deep")
        case .notJSON: return .invalidJSON("the body is not valid JSON")
        }
    }

    /// Decodes the body as `T`, mapping failures to `invalid_json` (not JSON, see
    /// ``refusal(of:)``) or `invalid_request` (JSON of the wrong shape, naming the field).
    /// An empty body reads as `{}`.
    static func decode<T: Decodable>(_ type: T.Type, from request: HTTPRequest) -> Result<T, APIError> {
        let bytes = request.body.isEmpty ? Array("{}".utf8) : request.body
        if let refusal = refusal(of: bytes) { return .failure(refusal) }
        do {
            return .success(try JSONDecoder().decode(T.self, from: Data(bytes)))
        } catch DecodingError.dataCorrupted(let context) where context.codingPath.isEmpty {
            return .failure(.invalidJSON("the body is not valid JSON"))
        } catch DecodingError.keyNotFound(let key, _) {
            return .failure(.invalidRequest("missing field \(key.stringValue)"))
        } catch DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context) {
            return .failure(.invalidRequest("field \(Self.path(context.codingPath)) has the wrong type"))
        } catch DecodingError.dataCorrupted(let context) {
            return .failure(.invalidRequest("field \(Self.path(context.codingPath)) is invalid"))
        } catch {
            return .failure(.invalidJSON("the body is not valid JSON"))
        }
    }

    private static func path(_ codingPath: [any CodingKey]) -> String {
        codingPath.map(\.stringValue).joined(separator: ".")
    }
}
