package persist

import (
	"context"
	"database/sql/driver"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"sync"

	"modernc.org/sqlite"

	"github.com/axe-sched/axe/model"
)

// The shard filter of scale-out (docs/scale-out.md): a node that schedules some shards reads
// only their tasks. The engine puts the shards it holds in the context of its scheduling
// reads (WithShards), and each of those reads adds the condition that the shard of the
// task's name, the top bits of its CRC-32 (model.ShardOf), is one of them. The database
// computes it: MySQL and MariaDB have CRC32(); the embedded store registers a function of
// that name that gives the same number. Without a filter in the context a read returns every
// shard's rows, as it always did.
//
// The reads that honour it are those of the engine's start and of a shard taken: LoadDue,
// LoadDueRefs, LoadByState, ListOpenFires, ListRunningManual, ListOpenParallelRuns,
// ListOpenBackfills, Dependents and PruneFinished.

type shardFilterKey struct{}

// WithShards returns ctx with a shard filter: the scheduling reads made with it return only
// the rows of tasks whose shard is in set.
func WithShards(ctx context.Context, set model.ShardSet) context.Context {
	return context.WithValue(ctx, shardFilterKey{}, set)
}

// ShardsOf returns the shard filter of ctx, if it has one.
func ShardsOf(ctx context.Context) (model.ShardSet, bool) {
	if fs, ok := ctx.Value(shardFilterKey{}).([]ShardFence); ok {
		var set model.ShardSet
		for _, f := range fs {
			set.Add(f.Shard)
		}
		return set, true
	}
	set, ok := ctx.Value(shardFilterKey{}).(model.ShardSet)
	return set, ok
}

// WithShardFences is WithShards for the shards of fences, and the writes a store makes of
// itself with ctx are fenced by them, checked in their transaction as a batch's are
// (Batch.Shards): PruneFinished's deletes, a backfill's row, the pruner's deletes.
func WithShardFences(ctx context.Context, fences []ShardFence) context.Context {
	return context.WithValue(ctx, shardFilterKey{}, fences)
}

// shardFencesOf returns the fences of ctx (WithShardFences), or nil.
func shardFencesOf(ctx context.Context) []ShardFence {
	fs, _ := ctx.Value(shardFilterKey{}).([]ShardFence)
	return fs
}

// shardCond is the condition " AND <the shard of name> IN (…)" that ctx's shard filter asks
// for, with name the SQL expression of a task's name; "" without a filter, or when it holds
// every shard. The shards are numbers of this process, written into the statement.
func shardCond(ctx context.Context, name string) string {
	set, ok := ShardsOf(ctx)
	if !ok || set == model.AllShards() {
		return ""
	}
	list := set.List()
	if len(list) == 0 {
		return " AND 1 = 0"
	}
	var b strings.Builder
	b.WriteString(" AND (CRC32(SUBSTRING_INDEX(")
	b.WriteString(name)
	b.WriteString(", '/', 1)) >> ")
	b.WriteString(strconv.Itoa(32 - model.ShardBits))
	b.WriteString(") IN (")
	for i, n := range list {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(n))
	}
	b.WriteByte(')')
	return b.String()
}

// registerCRC32 gives the embedded store MySQL's CRC32(): the CRC-32 (IEEE) of a string's
// bytes, as an unsigned 32-bit number (NULL for NULL).
var registerCRC32 = sync.OnceValue(func() error {
	err := sqlite.RegisterDeterministicScalarFunction("crc32", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		switch v := args[0].(type) {
		case nil:
			return nil, nil
		case string:
			return int64(crc32.ChecksumIEEE([]byte(v))), nil
		case []byte:
			return int64(crc32.ChecksumIEEE(v)), nil
		default:
			return int64(crc32.ChecksumIEEE([]byte(fmt.Sprint(v)))), nil
		}
	})
	if err != nil {
		return fmt.Errorf("cannot register crc32 for the embedded store: %w", err)
	}
	// And SUBSTRING_INDEX(s, delim, 1) of the shard key (model.ShardKey): what comes before
	// the first delim, or s whole. Only a count of 1 is asked for.
	err = sqlite.RegisterDeterministicScalarFunction("substring_index", 3, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		s, ok := args[0].(string)
		if !ok {
			if b, isBytes := args[0].([]byte); isBytes {
				s = string(b)
			} else if args[0] == nil {
				return nil, nil
			} else {
				s = fmt.Sprint(args[0])
			}
		}
		delim, _ := args[1].(string)
		if n, _ := args[2].(int64); n != 1 || delim == "" {
			return nil, fmt.Errorf("substring_index: only a count of 1 and a delimiter are supported")
		}
		if i := strings.Index(s, delim); i >= 0 {
			return s[:i], nil
		}
		return s, nil
	})
	if err != nil {
		return fmt.Errorf("cannot register substring_index for the embedded store: %w", err)
	}
	return nil
})
