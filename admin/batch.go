package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fasthttp/router"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/wire"
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
	api.POST("/tasks/batch", h(s.splitBatch(s.createBatch)))
	api.POST("/tasks/bulk/{op}", h(s.fanOut(s.bulkOp, "affected")))
	api.POST("/prune", h(s.fanOut(s.prune, "task_run", "task_action", "task_def")))
}

// prune is POST /api/v1/prune {"before": TIME|DURATION, "dry_run": bool}.
func (s *Server) prune(c *fasthttp.RequestCtx) {
	var b wire.PruneBody
	if err := decodeStrict(c, &b); err != nil {
		s.fail(c, err)
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
	res, err := s.cfg.Engine.API().Retention().Prune(ctx, before, before, b.DryRun)
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusOK, res)
}

// batchReadChunk bounds one read of a batch body, so that the decoder holds at most this
// much beyond the item it decodes when a limit stops it.
const batchReadChunk = 32 << 10

// batchReader is a batch body as decodeBatch reads it. It fails with errTooLarge once more
// than BatchMaxBodyBytes were read, or once the item being decoded has taken more than
// TaskMaxBodyBytes (the body limit of a single create: an item is one task definition), each
// on the read after the one that crossed: a client streaming one endless item costs the
// server about 256 KiB, not the 64 MiB of the whole body.
type batchReader struct {
	r     io.Reader
	read  int64
	start func() int64 // the input offset where the item being decoded starts
	item  int          // its index
}

func (b *batchReader) Read(p []byte) (int, error) {
	if b.read > BatchMaxBodyBytes {
		return 0, &errTooLarge{fmt.Sprintf("batch body is over the limit of %d bytes (64 MiB)", BatchMaxBodyBytes)}
	}
	if b.start != nil && b.read-b.start() > TaskMaxBodyBytes {
		return 0, &errTooLarge{fmt.Sprintf("item %d is over the limit of %d bytes (256 KiB) of one task definition", b.item, TaskMaxBodyBytes)}
	}
	if len(p) > batchReadChunk {
		p = p[:batchReadChunk]
	}
	n, err := b.r.Read(p)
	b.read += int64(n)
	return n, err
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
// object a line) when ndjson. The body is only split into items here; each item is then
// decoded strictly alone (engine.DecodeTaskSpec), so a spec that does not decode, a repeated
// key or invalid UTF-8 in it included, is an item error by its index. A body that is not JSON
// at all, or over a limit, ends decoding with an error.
func decodeBatch(r io.Reader, ndjson bool) ([]*wire.TaskSpec, []engine.ItemError, error) {
	var (
		specs []*wire.TaskSpec
		bad   []engine.ItemError
	)
	err := eachBatchItem(r, ndjson, func(i int, raw []byte) {
		spec, err := engine.DecodeTaskSpec(raw)
		if err != nil {
			bad = append(bad, engine.ItemError{Index: i, Err: err})
			spec = nil
		}
		specs = append(specs, spec)
	})
	if err != nil {
		return nil, nil, err
	}
	return specs, bad, nil
}

// splitBatchItems returns the items of a batch body as raw JSON, each a copy, without
// decoding them (a node that splits a batch by owner, shardfront.go).
func splitBatchItems(r io.Reader, ndjson bool) ([][]byte, error) {
	var raws [][]byte
	err := eachBatchItem(r, ndjson, func(_ int, raw []byte) { raws = append(raws, bytes.Clone(raw)) })
	return raws, err
}

// eachBatchItem hands each item of a batch body to fn as it is read, raw (valid until fn
// returns), with its index. A body that is not JSON at all, or over a limit, ends it with an
// error.
func eachBatchItem(r io.Reader, ndjson bool, fn func(i int, raw []byte)) error {
	br := &batchReader{r: r}
	// Splitting tolerates what the strict decoding of each item refuses, so that the refusal
	// names the item.
	dec := jsontext.NewDecoder(br, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	br.start = dec.InputOffset
	if !ndjson {
		tok, err := dec.ReadToken()
		if err != nil {
			return bodyErr(err, "the body must be a JSON array of task definitions")
		}
		if tok.Kind() != '[' {
			return fmt.Errorf("%w: the body must be a JSON array of task definitions (or NDJSON with Content-Type: %s)", ErrBadRequest, ndjsonType)
		}
	}
	for i := 0; ; i++ {
		br.item = i
		if !ndjson && dec.PeekKind() == ']' {
			break
		}
		raw, err := dec.ReadValue()
		if ndjson && errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return bodyErr(err, fmt.Sprintf("item %d is not valid JSON", i))
		}
		if i >= BatchMaxTasks {
			return &errTooLarge{fmt.Sprintf("batch is over the limit of %d tasks", BatchMaxTasks)}
		}
		fn(i, raw)
	}
	br.start = nil
	if !ndjson {
		if _, err := dec.ReadToken(); err != nil {
			return bodyErr(err, "the JSON array is not closed")
		}
		if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: trailing data after the JSON array", ErrBadRequest)
		}
	}
	return nil
}

// bodyErr passes a limit error through and makes anything else a bad request.
func bodyErr(err error, what string) error {
	var tl *errTooLarge
	if errors.As(err, &tl) {
		return tl
	}
	return fmt.Errorf("%w: %s: %v", ErrBadRequest, what, strings.TrimPrefix(err.Error(), "jsontext: "))
}

func (s *Server) writeBatchError(c *fasthttp.RequestCtx, code int, items []engine.ItemError) {
	out := wire.BatchRefusal{Errors: make([]wire.BatchItemError, len(items))}
	for i, it := range items {
		msg := strings.TrimPrefix(it.Err.Error(), engine.ErrInvalidTask.Error()+": ")
		out.Errors[i] = wire.BatchItemError{Index: it.Index, Error: msg}
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
	var opts []engine.CreateOption
	if routed(c) && len(c.Request.Header.Peek(upstreamsCheckedHeader)) > 0 {
		// A part of a batch a node split by owner (shardfront.go), whose upstreams it
		// checked against the whole batch: some are items of the other parts.
		opts = append(opts, engine.UpstreamsChecked())
	}
	res, err := s.cfg.Engine.API().CreateTasks(ctx, specs, onConflict, actor(c), opts...)
	if err != nil {
		s.failBatch(c, bad, err)
		return
	}
	writeJSON(c, fasthttp.StatusOK, res)
}

// failBatch answers a batch the engine refused (err) with the items bad refused already: a
// *engine.BatchError names every item (409 when the only fault is names taken, else 400),
// any other error as fail answers it.
func (s *Server) failBatch(c *fasthttp.RequestCtx, bad []engine.ItemError, err error) {
	var be *engine.BatchError
	if !errors.As(err, &be) {
		s.fail(c, err)
		return
	}
	code := fasthttp.StatusBadRequest
	if len(bad) == 0 && errors.Is(err, engine.ErrTaskExists) {
		code = fasthttp.StatusConflict
	}
	s.writeBatchError(c, code, mergeItems(bad, be.Items))
}

// bulkOp is POST /api/v1/tasks/bulk/{pause|resume|delete|run}[?dry_run=true].
func (s *Server) bulkOp(c *fasthttp.RequestCtx) {
	var sel wire.Selector
	if err := decodeStrict(c, &sel); err != nil {
		s.fail(c, err)
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
	n, err := s.cfg.Engine.API().Bulk(ctx, param(c, "op"), sel, dry, actor(c))
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
