// Package api holds the shapes of axe's REST API: the request bodies the server decodes and
// the answers it encodes, with their JSON field names. The server (admin), the scheduler
// (engine, which takes and returns these shapes at its API-side methods), the Go client and
// the axe command all use these types, so a field is named in one place and docs/openapi.yaml
// describes this package.
//
// The package is a leaf: it imports only model, ratelimit (for a rate limit's shape) and the
// standard library, so the client links no scheduler, store or SQL driver.
package api
