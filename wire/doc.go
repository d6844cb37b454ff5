// Package wire holds the shapes of axe's REST API (/api/v1): the request bodies the server
// decodes and the answers it encodes, with their JSON field names. The server (admin), the
// scheduler (engine, whose API-side methods take and return these shapes), the Go client and
// the axe command all use these types, so each field is named in one place; docs/openapi.yaml
// describes them. The engine itself declares no JSON.
//
// The package is a leaf: it imports only model, ratelimit (a rate limit's shape) and the
// standard library, so the client links no scheduler, store or SQL driver.
package wire
