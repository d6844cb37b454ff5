package admin

import (
	"fmt"
	"io"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/protocol"
	"github.com/axe-sched/axe/workflow"
)

// Request body limits per endpoint (docs/security.md has the table). Each fits what the
// endpoint takes, with room for JSON's escapes; a body over its endpoint's limit is refused
// with 413 naming the limit before it is read, let alone decoded.
const (
	// NoBodyMaxBytes bounds the body of an endpoint that takes none (GET, DELETE, kill).
	NoBodyMaxBytes = 4 << 10
	// NoteMaxBytes bounds pause and resume (of a task or a group): a note of at most 1,024
	// characters, each of which JSON may spell in up to 12 bytes.
	NoteMaxBytes = 16 << 10
	// TaskMaxBodyBytes bounds a task create or update: params of at most
	// engine.MaxParamsBytes, and the definition's other fields.
	TaskMaxBodyBytes = 4 * engine.MaxParamsBytes
	// RunNowMaxBodyBytes bounds a run-now: its params.
	RunNowMaxBodyBytes = 2 * engine.MaxParamsBytes
	// SmallBodyMaxBytes bounds the small settings bodies: rate limits, prune.
	SmallBodyMaxBytes = 4 << 10
	// BulkMaxBodyBytes bounds a bulk operation's selector, which may list up to 100,000 names.
	BulkMaxBodyBytes = 16 << 20
	// StepSucceedMaxBodyBytes bounds marking a workflow step succeeded: an output as large
	// as a step's may be (workflow.OutputMax, 1 MiB), and a note.
	StepSucceedMaxBodyBytes = 2 * workflow.OutputMax
)

// bodyLimit is the largest request body an endpoint takes, and how its error words that
// limit. path is the request path without the base path.
func bodyLimit(method, path string) (limit int, what string) {
	switch path {
	case batchPath:
		return BatchMaxBodyBytes, "64 MiB"
	case protocol.PathRegister:
		return protocol.MaxRegisterBodyBytes, "512 KiB"
	case protocol.PathHeartbeat, protocol.PathDeregister:
		return protocol.MaxHeartbeatBodyBytes, "4 KiB"
	case protocol.PathCallback, protocol.PathCallbackBatch:
		return protocol.MaxResultBodyBytes, "8 MiB"
	}
	if method != fasthttp.MethodPost && method != fasthttp.MethodPut {
		return NoBodyMaxBytes, "4 KiB: this endpoint takes no body"
	}
	rest, ok := strings.CutPrefix(path, "/api/v1/")
	if !ok {
		return MaxRequestBodyDefault, "1 MiB"
	}
	parts := strings.Split(rest, "/")
	switch {
	case rest == "tasks" || (len(parts) == 2 && parts[0] == "tasks"): // create, update
		return TaskMaxBodyBytes, "256 KiB"
	case len(parts) == 3 && parts[0] == "tasks" && parts[1] == "bulk":
		return BulkMaxBodyBytes, "16 MiB"
	case len(parts) == 3 && (parts[0] == "tasks" || parts[0] == "groups") && (parts[2] == "pause" || parts[2] == "resume"):
		return NoteMaxBytes, "16 KiB"
	case len(parts) == 3 && parts[0] == "tasks" && parts[2] == "run":
		return RunNowMaxBodyBytes, "128 KiB"
	case len(parts) == 3 && parts[0] == "tasks" && parts[2] == "kill":
		return NoBodyMaxBytes, "4 KiB: this endpoint takes no body"
	case len(parts) == 5 && parts[0] == "workflow-runs" && parts[2] == "steps" && parts[4] == "succeed":
		return StepSucceedMaxBodyBytes, "2 MiB"
	case rest == "ratelimits" || rest == "prune" || (len(parts) == 3 && parts[0] == "concurrency-limits"):
		return SmallBodyMaxBytes, "4 KiB"
	}
	return MaxRequestBodyDefault, "1 MiB"
}

// limitBodies holds every endpoint to its body limit (bodyLimit). The server streams request
// bodies (fasthttp's StreamRequestBody) so that the batch endpoint can decode a large body
// as it arrives; every other endpoint is refused a body over its limit before it is read
// (by its Content-Length, or after limit+1 bytes of a chunked one), and gets the rest as one
// buffer.
func (s *Server) limitBodies(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		// The path as sent, which the router matches (routePath): the decoded one may name
		// another endpoint, of a larger limit.
		path := string(c.Request.URI().PathOriginal())
		if s.cfg.BasePath != "" {
			path = strings.TrimPrefix(path, s.cfg.BasePath)
		}
		limit, what := bodyLimit(string(c.Method()), path)
		switch cl := c.Request.Header.ContentLength(); {
		case cl > limit:
			c.SetConnectionClose()
			writeErr(c, fasthttp.StatusRequestEntityTooLarge,
				fmt.Sprintf("request body of %d bytes is over this endpoint's limit of %d bytes (%s)", cl, limit, what))
			return
		case path == batchPath:
			// createBatch reads the stream as it decodes, under the same limit.
		case cl == -1: // chunked: read at most one byte past the limit
			body, err := io.ReadAll(io.LimitReader(c.RequestBodyStream(), int64(limit)+1))
			if err != nil {
				writeErr(c, fasthttp.StatusBadRequest, "cannot read request body: "+err.Error())
				return
			}
			if len(body) > limit {
				c.SetConnectionClose()
				writeErr(c, fasthttp.StatusRequestEntityTooLarge,
					fmt.Sprintf("request body is over this endpoint's limit of %d bytes (%s)", limit, what))
				return
			}
			c.Request.SetBody(body)
		}
		next(c)
	}
}
