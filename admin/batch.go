package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
)

// Limits of POST /api/v1/tasks/batch (docs/bulk.md). Every other endpoint has its own
// body limit (bodylimit.go).
const (
	// BatchMaxBodyBytes is the largest batch body taken: 64 MiB.
	BatchMaxBodyBytes = 64 << 20
	// BatchMaxTasks is the most tasks one batch takes.
	BatchMaxTasks = engine.BatchMaxTasks
	// RetryAfterBusySec is the Retry-After a create refused by a saturated writer carries.
	RetryAfterBusySec = 1
)

const (
	batchPath   = "/api/v1/tasks/batch"
	ndjsonType  = "application/x-ndjson"
	bulkTimeout = 30 * time.Minute
)

// errTooLarge reports a body over one of the batch limits; its text names the limit.
type errTooLarge struct{ msg string }

func (e *errTooLarge) Error() string { return e.msg }

// writeRoutes registers the bulk write endpoints.
func (s *Server) writeRoutes(api *router.Group) {
	h := s.authed
	api.POST("/tasks/batch", h(s.createBatch))
	api.POST("/tasks/bulk/{op}", h(s.bulkOp))
	api.POST("/prune", h(s.prune))
}

// prune is POST /api/v1/prune {"before": TIME|DURATION, "dry_run": bool}.
func (s *Server) prune(c *fasthttp.RequestCtx) {
	var b struct {
		Before string `json:"before"`
		DryRun bool   `json:"dry_run"`
	}
	dec := json.NewDecoder(bytes.NewReader(c.PostBody()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		writeErr(c, fasthttp.StatusBadRequest, "invalid body: "+strings.TrimPrefix(err.Error(), "json: "))
		return
	}
	var before int64
	if ts, err := time.Parse(time.RFC3339Nano, b.Before); err == nil {
		before = ts.UnixMilli()
	} else if d, err := engine.ParseRetention(b.Before); err == nil {
		before = time.Now().Add(-d).UnixMilli()
	} else {
		writeErr(c, fasthttp.StatusBadRequest, fmt.Sprintf("before: must be an RFC 3339 time or an age such as 7d or 36h, got %q", b.Before))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), bulkTimeout)
	defer cancel()
	res, err := s.cfg.Engine.Prune(ctx, before, before, b.DryRun)
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusOK, res)
}

// limitReader fails with errTooLarge once more than n bytes were read.
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, &errTooLarge{fmt.Sprintf("batch body is over the limit of %d bytes (64 MiB)", BatchMaxBodyBytes)}
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	k, err := l.r.Read(p)
	l.n -= int64(k)
	if l.n < 0 {
		return k, &errTooLarge{fmt.Sprintf("batch body is over the limit of %d bytes (64 MiB)", BatchMaxBodyBytes)}
	}
	return k, err
}

// batchBody is the request body of a batch: the stream when the server streams it, else the
// buffer.
func batchBody(c *fasthttp.RequestCtx) io.Reader {
	if r := c.RequestBodyStream(); r != nil {
		return r
	}
	return bytes.NewReader(c.PostBody())
}

// decodeBatch reads the task specs of a batch as they arrive: a JSON array, or NDJSON (one
// object a line) when ndjson. A spec that does not decode is an item error by its index; a
// body that is not JSON at all, or over a limit, ends decoding with an error.
func decodeBatch(r io.Reader, ndjson bool) ([]*engine.TaskSpec, []engine.ItemError, error) {
	dec := json.NewDecoder(&limitReader{r: r, n: BatchMaxBodyBytes})
	if !ndjson {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, bodyErr(err, "the body must be a JSON array of task definitions")
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return nil, nil, fmt.Errorf("%w: the body must be a JSON array of task definitions (or NDJSON with Content-Type: %s)", ErrBadRequest, ndjsonType)
		}
	}
	var (
		specs []*engine.TaskSpec
		bad   []engine.ItemError
	)
	for i := 0; ; i++ {
		if !ndjson && !dec.More() {
			break
		}
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if ndjson && errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, bodyErr(err, fmt.Sprintf("item %d is not valid JSON", i))
		}
		if i >= BatchMaxTasks {
			return nil, nil, &errTooLarge{fmt.Sprintf("batch is over the limit of %d tasks", BatchMaxTasks)}
		}
		spec, err := engine.DecodeTaskSpec(raw)
		if err != nil {
			bad = append(bad, engine.ItemError{Index: i, Err: err})
			specs = append(specs, nil)
			continue
		}
		specs = append(specs, spec)
	}
	if !ndjson {
		if _, err := dec.Token(); err != nil {
			return nil, nil, bodyErr(err, "the JSON array is not closed")
		}
		switch _, err := dec.Token(); {
		case err == nil: // a value after the array ("[…] 0") is a token, not an error
			return nil, nil, fmt.Errorf("%w: trailing data after the JSON array", ErrBadRequest)
		case !errors.Is(err, io.EOF):
			return nil, nil, bodyErr(err, "trailing data after the JSON array")
		}
	}
	return specs, bad, nil
}

// bodyErr passes a limit error through and makes anything else a bad request.
func bodyErr(err error, what string) error {
	var tl *errTooLarge
	if errors.As(err, &tl) {
		return tl
	}
	return fmt.Errorf("%w: %s: %v", ErrBadRequest, what, strings.TrimPrefix(err.Error(), "json: "))
}

// batchErrorJSON is the answer to a refused batch.
type batchErrorJSON struct {
	Error  string          `json:"error"`
	Errors []itemErrorJSON `json:"errors"`
}

type itemErrorJSON struct {
	Index int    `json:"index"`
	Error string `json:"error"`
}

func (s *Server) writeBatchError(c *fasthttp.RequestCtx, code int, items []engine.ItemError) {
	out := batchErrorJSON{Errors: make([]itemErrorJSON, len(items))}
	for i, it := range items {
		msg := strings.TrimPrefix(it.Err.Error(), engine.ErrInvalidTask.Error()+": ")
		out.Errors[i] = itemErrorJSON{Index: it.Index, Error: msg}
	}
	out.Error = fmt.Sprintf("%d of the batch's items are refused; nothing was created", len(items))
	if len(items) == 1 {
		out.Error = fmt.Sprintf("item %d is refused; nothing was created", items[0].Index)
	}
	writeJSON(c, code, out)
}

// mergeItems merges two lists of item errors sorted by index.
func mergeItems(a, b []engine.ItemError) []engine.ItemError {
	out := make([]engine.ItemError, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].Index <= b[0].Index {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// createBatch is POST /api/v1/tasks/batch (docs/bulk.md).
func (s *Server) createBatch(c *fasthttp.RequestCtx) {
	if cl := c.Request.Header.ContentLength(); cl > BatchMaxBodyBytes {
		c.SetConnectionClose()
		writeErr(c, fasthttp.StatusRequestEntityTooLarge,
			fmt.Sprintf("batch body of %d bytes is over the limit of %d bytes (64 MiB)", cl, BatchMaxBodyBytes))
		return
	}
	onConflict := string(c.QueryArgs().Peek("on_conflict"))
	switch onConflict {
	case "", engine.OnConflictError, engine.OnConflictSkip, engine.OnConflictReplace:
	default:
		writeErr(c, fasthttp.StatusBadRequest, fmt.Sprintf("on_conflict: must be error, skip or replace; got %q", onConflict))
		return
	}
	ct := string(c.Request.Header.ContentType())
	ndjson := strings.HasPrefix(strings.TrimSpace(strings.ToLower(ct)), ndjsonType)
	specs, bad, err := decodeBatch(batchBody(c), ndjson)
	if err != nil {
		var tl *errTooLarge
		if errors.As(err, &tl) {
			c.SetConnectionClose() // the rest of the body is not read
			writeErr(c, fasthttp.StatusRequestEntityTooLarge, tl.msg)
			return
		}
		s.fail(c, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := s.cfg.Engine.CreateTasks(ctx, specs, onConflict, actor(c))
	var be *engine.BatchError
	if errors.As(err, &be) {
		code := fasthttp.StatusBadRequest
		if len(bad) == 0 && errors.Is(err, engine.ErrTaskExists) {
			code = fasthttp.StatusConflict
		}
		s.writeBatchError(c, code, mergeItems(bad, be.Items))
		return
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusOK, res)
}

// bulkOp is POST /api/v1/tasks/bulk/{pause|resume|delete|run}[?dry_run=true].
func (s *Server) bulkOp(c *fasthttp.RequestCtx) {
	var sel engine.Selector
	dec := json.NewDecoder(bytes.NewReader(c.PostBody()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sel); err != nil {
		writeErr(c, fasthttp.StatusBadRequest, "invalid selector: "+strings.TrimPrefix(err.Error(), "json: "))
		return
	}
	dry := false
	switch v := string(c.QueryArgs().Peek("dry_run")); v {
	case "", "false", "0":
	case "true", "1":
		dry = true
	default:
		writeErr(c, fasthttp.StatusBadRequest, fmt.Sprintf("dry_run: must be true or false, got %q", v))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), bulkTimeout)
	defer cancel()
	n, err := s.cfg.Engine.Bulk(ctx, param(c, "op"), sel, dry, actor(c))
	if err != nil {
		if n > 0 {
			err = fmt.Errorf("%w (after %d tasks)", err, n)
		}
		s.fail(c, err)
		return
	}
	out := map[string]any{"affected": n}
	if dry {
		out["dry_run"] = true
	}
	writeJSON(c, fasthttp.StatusOK, out)
}
