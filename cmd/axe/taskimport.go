package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/lib/visible"
)

// importBatchDefault is how many lines one batch of axe task import carries: large enough
// that a batch's commit carries many tasks, small enough that a refused batch is cheap to
// fix and resend.
const importBatchDefault = 2000

// importLineMax bounds one line of an import file (a task definition), like the API bounds
// a batch.
const importLineMax = admin.BatchMaxBodyBytes

// writeCmds are the task subcommands of the bulk write path: import and bulk.
func writeCmds() []*ffcli.Command {
	var (
		file, onConflict string
		batch            int
		keepGoing        bool
	)
	imp := clientCmd("import", "axe task import -f tasks.ndjson [--batch N] [--on-conflict error|skip|replace] [--continue]",
		"create tasks from an NDJSON file (one definition a line), in batches", 0,
		func(fs *flag.FlagSet) {
			fs.StringVar(&file, "f", "", "NDJSON file of task definitions, - for stdin")
			fs.IntVar(&batch, "batch", importBatchDefault, fmt.Sprintf("lines per batch, at most %d (AXE_BATCH)", admin.BatchMaxTasks))
			fs.StringVar(&onConflict, "on-conflict", "error", "a taken name: error, skip or replace (AXE_ON_CONFLICT)")
			fs.BoolVar(&keepGoing, "continue", false, "go on past refused batches (AXE_CONTINUE)")
		},
		func(ctx context.Context, c *client.Client, _ []string) error {
			if batch < 1 || batch > admin.BatchMaxTasks {
				return fmt.Errorf("--batch: must be 1..%d, got %d", admin.BatchMaxTasks, batch)
			}
			switch onConflict {
			case "error", "skip", "replace":
			default:
				return fmt.Errorf("--on-conflict: must be error, skip or replace; got %q", onConflict)
			}
			in, name, err := openImport(file)
			if err != nil {
				return err
			}
			defer in.Close()
			imp := &importer{c: c, batch: batch, onConflict: onConflict, keepGoing: keepGoing,
				out: os.Stderr, tty: isTerminal(os.Stderr), size: sizeOf(in), name: name}
			return imp.run(ctx, in)
		})

	var sel client.BulkSelector
	var names string
	var dry bool
	bulkOp := func(op string) *ffcli.Command {
		return clientCmd(op, "axe task bulk "+op+" [--group G] [--prefix P] [--state S] [--names a,b] [--note N] [--dry-run]",
			op+" every task the selector picks (criteria combine with AND)", 0,
			func(fs *flag.FlagSet) {
				fs.StringVar(&sel.Group, "group", "", "tasks of this group")
				fs.StringVar(&sel.NamePrefix, "prefix", "", "tasks whose name starts with this")
				fs.StringVar(&sel.State, "state", "", "tasks in this state")
				fs.StringVar(&names, "names", "", "comma-separated task names")
				fs.StringVar(&sel.Note, "note", "", "kept in each task's action record")
				fs.BoolVar(&dry, "dry-run", false, "count the tasks, change nothing")
			},
			func(ctx context.Context, c *client.Client, _ []string) error {
				if names != "" {
					sel.Names = strings.Split(names, ",")
				}
				n, err := c.Bulk(ctx, op, sel, dry)
				if err != nil {
					return err
				}
				if dry {
					fmt.Printf("%s would affect %d task(s)\n", op, n)
				} else {
					fmt.Printf("%s: %d task(s)\n", op, n)
				}
				return nil
			})
	}
	bulk := &ffcli.Command{
		Name:       "bulk",
		ShortUsage: "axe task bulk <pause|resume|delete|run> [selector flags]",
		ShortHelp:  "operate on many tasks at once",
		Exec:       parentExec,
		Subcommands: []*ffcli.Command{
			bulkOp("pause"), bulkOp("resume"), bulkOp("delete"), bulkOp("run"),
		},
	}
	return []*ffcli.Command{imp, bulk}
}

func openImport(path string) (io.ReadCloser, string, error) {
	switch path {
	case "":
		return nil, "", errors.New("-f: an NDJSON file is required (- for standard input)")
	case "-":
		return io.NopCloser(os.Stdin), "stdin", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("-f: %w", err)
	}
	return f, path, nil
}

// sizeOf is the size of a regular file, or 0 when unknown (a pipe).
func sizeOf(r io.Reader) int64 {
	if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			return st.Size()
		}
	}
	return 0
}

// isTerminal reports whether f is a character device (a terminal): the progress line is
// redrawn there, while a pipe or file gets a plain line per batch.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// importer sends an NDJSON stream in batches and reports progress.
type importer struct {
	c          *client.Client
	batch      int
	onConflict string
	keepGoing  bool
	out        io.Writer
	tty        bool
	size       int64 // bytes in the file, 0 if unknown
	name       string

	start                      time.Time
	read                       int64 // bytes read
	created, skipped, replaced int
	failed, refusedBatches     int
	lastDraw                   time.Time
}

func (im *importer) run(ctx context.Context, in io.Reader) error {
	im.start = time.Now()
	r := bufio.NewReaderSize(in, 1<<20)
	var (
		specs []json.RawMessage
		lines []int
		line  int
		stop  error
	)
	flush := func() {
		if len(specs) == 0 || stop != nil {
			return
		}
		stop = im.send(ctx, specs, lines)
		specs, lines = specs[:0], lines[:0]
	}
	for stop == nil {
		raw, err := readLine(r)
		if len(raw) > 0 {
			line++
			im.read += int64(len(raw)) + 1
			if t := bytes.TrimSpace(raw); len(t) > 0 {
				specs = append(specs, json.RawMessage(t))
				lines = append(lines, line)
				if len(specs) == im.batch {
					flush()
				}
			}
		} else if err == nil {
			line++ // an empty line
			im.read++
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			stop = fmt.Errorf("cannot read %s at line %d: %w", im.name, line+1, err)
		}
	}
	flush()
	im.draw(true)
	fmt.Fprintf(im.out, "imported %s: %d created, %d skipped, %d replaced, %d failed (%d refused batch(es)) in %s\n",
		im.name, im.created, im.skipped, im.replaced, im.failed, im.refusedBatches, time.Since(im.start).Round(time.Millisecond))
	if stop == nil && im.failed > 0 {
		stop = fmt.Errorf("%d task(s) not created", im.failed)
	}
	return stop
}

// readLine returns the next line without its newline; a line over importLineMax is an
// error.
func readLine(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		part, err := r.ReadSlice('\n')
		buf = append(buf, part...)
		if len(buf) > importLineMax {
			return nil, fmt.Errorf("a line is over %d bytes", importLineMax)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && len(buf) > 0 && errors.Is(err, io.EOF) {
			return bytes.TrimRight(buf, "\r\n"), nil
		}
		return bytes.TrimRight(buf, "\r\n"), err
	}
}

// send creates one batch. A refused batch names the file line of each bad item; it stops
// the import unless keepGoing.
func (im *importer) send(ctx context.Context, specs []json.RawMessage, lines []int) error {
	for i, s := range specs {
		if !json.Valid(s) {
			// The server would refuse it too; say so without sending the batch.
			im.refuse(len(specs), client.BatchResult{}, []string{fmt.Sprintf("line %d: not valid JSON", lines[i])})
			return im.refusedErr()
		}
	}
	res, err := im.c.CreateTasks(ctx, specs, im.onConflict)
	var ae *client.APIError
	if errors.As(err, &ae) {
		// A sharded cluster's owners each create their part: what they did counts, and only
		// the rest failed.
		im.created += ae.Done.Created
		im.skipped += ae.Done.Skipped
		im.replaced += ae.Done.Replaced
	}
	if errors.As(err, &ae) && len(ae.Items) > 0 {
		msgs := make([]string, 0, len(ae.Items))
		for _, it := range ae.Items {
			ln := 0
			if it.Index >= 0 && it.Index < len(lines) {
				ln = lines[it.Index]
			}
			msgs = append(msgs, fmt.Sprintf("line %d: %s", ln, it.Error))
		}
		im.refuse(len(specs), ae.Done, msgs)
		return im.refusedErr()
	}
	if err != nil {
		if ae != nil {
			im.failed += len(specs) - ae.Done.Created - ae.Done.Skipped - ae.Done.Replaced
		} else {
			im.failed += len(specs)
		}
		return fmt.Errorf("cannot import lines %d-%d: %w", lines[0], lines[len(lines)-1], err)
	}
	im.created += res.Created
	im.skipped += res.Skipped
	im.replaced += res.Replaced
	im.draw(false)
	return nil
}

func (im *importer) refuse(n int, done client.BatchResult, msgs []string) {
	did := done.Created + done.Skipped + done.Replaced
	im.failed += n - did
	im.refusedBatches++
	if im.tty {
		fmt.Fprint(im.out, "\r\033[K")
	}
	if did == 0 {
		fmt.Fprintf(im.out, "batch of %d refused, nothing of it created:\n", n)
	} else {
		fmt.Fprintf(im.out, "batch of %d refused in part: %d created, %d skipped, %d replaced; the others not:\n", n,
			done.Created, done.Skipped, done.Replaced)
	}
	for _, m := range msgs {
		fmt.Fprintf(im.out, "  %s\n", visible.Line(m))
	}
}

func (im *importer) refusedErr() error {
	if im.keepGoing {
		return nil
	}
	return errors.New("import stopped at a refused batch (--continue goes on past it)")
}

// draw shows progress: on a terminal one line redrawn at most ten times a second (count,
// rate, ETA from the share of the file read); elsewhere one plain line per batch.
func (im *importer) draw(final bool) {
	now := time.Now()
	done := im.created + im.skipped + im.replaced
	elapsed := now.Sub(im.start).Seconds()
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed
	}
	eta := "?"
	if im.size > 0 && im.read > 0 && im.read < im.size {
		eta = time.Duration(elapsed * float64(im.size-im.read) / float64(im.read) * float64(time.Second)).Round(time.Second).String()
	} else if im.size > 0 {
		eta = "0s"
	}
	if !im.tty {
		if !final {
			fmt.Fprintf(im.out, "%d tasks, %.0f/s, eta %s\n", done, rate, eta)
		}
		return
	}
	if !final && now.Sub(im.lastDraw) < 100*time.Millisecond {
		return
	}
	im.lastDraw = now
	bar := ""
	if im.size > 0 {
		const width = 30
		k := int(float64(width) * float64(min(im.read, im.size)) / float64(im.size))
		bar = "[" + strings.Repeat("=", k) + strings.Repeat(" ", width-k) + "] "
	}
	fmt.Fprintf(im.out, "\r\033[K%s%d tasks  %.0f/s  eta %s", bar, done, rate, eta)
	if final {
		fmt.Fprintln(im.out)
	}
}
