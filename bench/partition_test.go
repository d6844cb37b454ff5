package bench

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/bench/internal/benchkit"
)

// Day partitions: what pruning a day of run rows costs MariaDB as batched deletes (what the
// pruner does) and as a partition drop, and what day partitions cost every write that finds a
// run row by its ticket alone. Two tables of task_run's shape and indexes are filled with the
// same rows over several days: one as the schema keeps it (the ticket is the primary key), one
// partitioned by RANGE on scheduled_at a day per partition, whose primary key must then be
// (ticket, scheduled_at). It reports, per table:
//
//   - the server CPU and wall time of inserting the rows;
//   - the server CPU of finishing rows by ticket (the result write), which on the partitioned
//     table must probe every partition unless the write names the day;
//   - the server CPU and wall time of removing the oldest day, and the insert rate a
//     concurrent writer keeps meanwhile.
//
//	AXE_TEST_MYSQL_DSN='root:@tcp(127.0.0.1:3306)/' \
//	go test -run '^$' -bench PruneDay -benchtime 1x ./bench/ -args -partition.size=2e5
//
// Needs the server's pid file readable here (a local server); otherwise it skips.

var flagPartitionSize = flag.String("partition.size", "", "day partitions: run rows per day (env "+envPartitionSize+"; default 2e4)")

const (
	envPartitionSize = "AXE_BENCH_PARTITION_SIZE"
	partitionDays    = 4
	dayMS            = int64(24 * time.Hour / time.Millisecond)
)

// runTableDDL is task_run's shape and indexes (schema steps 1–5), named name; partitioned
// moves scheduled_at into the primary key and splits the table by day.
func runTableDDL(name string, partitioned bool, day0 int64) string {
	pk := "PRIMARY KEY (ticket)"
	if partitioned {
		pk = "PRIMARY KEY (ticket, scheduled_at)"
	}
	ddl := `CREATE TABLE ` + name + ` (
		ticket VARCHAR(128) NOT NULL,
		task_id BIGINT NOT NULL,
		task_name VARCHAR(255) NOT NULL,
		kind VARCHAR(32) NOT NULL,
		attempt INT NOT NULL,
		scheduled_at BIGINT NOT NULL,
		dispatched_at BIGINT NOT NULL,
		executor VARCHAR(255) NOT NULL,
		ended_at BIGINT NOT NULL,
		result VARCHAR(32) NOT NULL,
		error TEXT NOT NULL,
		duration_ms BIGINT NOT NULL,
		output TEXT NOT NULL,
		detail TEXT NOT NULL,
		` + pk + `,
		KEY idx_task (task_id, scheduled_at),
		KEY idx_sched (scheduled_at)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`
	if partitioned {
		var parts []string
		for d := 1; d <= partitionDays+1; d++ {
			parts = append(parts, fmt.Sprintf("PARTITION p%d VALUES LESS THAN (%d)", d-1, day0+int64(d)*dayMS))
		}
		ddl += " PARTITION BY RANGE (scheduled_at) (" + strings.Join(parts, ", ") + ")"
	}
	return ddl
}

// insertRuns writes rows [from, to) of the fixture into table, 1,000 a statement: row i falls
// on day i % partitionDays, so every day is filled evenly and the writes interleave the days
// as a steady load does; or, with today ≥ 0, on that day.
func insertRuns(ctx context.Context, db *sql.DB, table string, day0 int64, from, to, perDay, today int) error {
	const perStmt = 1000
	var b strings.Builder
	for lo := from; lo < to; lo += perStmt {
		b.Reset()
		b.WriteString("INSERT INTO " + table + " VALUES ")
		for i := lo; i < min(lo+perStmt, to); i++ {
			if i > lo {
				b.WriteByte(',')
			}
			day := i % partitionDays
			if today >= 0 {
				day = today
			}
			at := day0 + int64(day)*dayMS + int64(i/partitionDays)%int64(perDay)*dayMS/int64(perDay)
			fmt.Fprintf(&b, "('%d-%d-1',%d,'r-%d','scheduled',1,%d,%d,'127.0.0.1:9',%d,'success','',3,'','')",
				i+1, at, i+1, i+1, at, at+1, at+4)
		}
		if _, err := db.ExecContext(ctx, b.String()); err != nil {
			return err
		}
	}
	return nil
}

func BenchmarkPruneDay(b *testing.B) {
	perDay := sizeParam(b, flagPartitionSize, envPartitionSize, 2e4)
	ctx := context.Background()
	_, db := scratchStore(b, 4)
	pid := benchkit.ServerPID(ctx, db)
	if pid == 0 {
		b.Skip("skipping: the MySQL server's CPU is not readable from here (no local pid file)")
	}
	info, _ := benchkit.ReadServerInfo(ctx, db)
	fmt.Printf("day partitions: server %s\n", info)
	cpu := func(fn func() error) (time.Duration, time.Duration, error) {
		c0, err := benchkit.ProcessCPU(pid)
		if err != nil {
			return 0, 0, err
		}
		t0 := time.Now()
		if err := fn(); err != nil {
			return 0, 0, err
		}
		wall := time.Since(t0)
		c1, err := benchkit.ProcessCPU(pid)
		return c1 - c0, wall, err
	}
	day0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	total := perDay * partitionDays
	s := &benchkit.Series{}
	for it := 0; it < b.N; it++ {
		for _, partitioned := range []bool{false, true} {
			kind := "one table"
			if partitioned {
				kind = "day partitions"
			}
			table := "run_" + strconv.Itoa(it)
			if partitioned {
				table += "_part"
			}
			if _, err := db.ExecContext(ctx, runTableDDL(table, partitioned, day0)); err != nil {
				b.Fatal(err)
			}
			c, w, err := cpu(func() error { return insertRuns(ctx, db, table, day0, 0, total, perDay, -1) })
			if err != nil {
				b.Fatal(err)
			}
			s.Add(kind+": insert, server µs/row", float64(c.Microseconds())/float64(total))
			s.Add(kind+": insert, rows/s", float64(total)/w.Seconds())

			// The result write: finish 5,000 rows found by ticket alone, 500 a transaction, as
			// the writer's upsert by ticket finds them in its batches.
			const finishes, perTx = 5000, 500
			c, _, err = cpu(func() error {
				for lo := 0; lo < finishes; lo += perTx {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					for i := lo; i < lo+perTx; i++ {
						k := (i * 7919) % total
						at := day0 + int64(k%partitionDays)*dayMS + int64(k/partitionDays)*dayMS/int64(perDay)
						if _, err := tx.ExecContext(ctx, "UPDATE "+table+" SET ended_at = ended_at + 1 WHERE ticket = ?",
							fmt.Sprintf("%d-%d-1", k+1, at)); err != nil {
							_ = tx.Rollback()
							return err
						}
					}
					if err := tx.Commit(); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			s.Add(kind+": finish by ticket, server µs/row", float64(c.Microseconds())/finishes)

			// Remove the oldest day while a writer keeps inserting new rows into today's.
			stop := make(chan struct{})
			written := make(chan int)
			go func() {
				n, next := 0, total
				for {
					select {
					case <-stop:
						written <- n
						return
					default:
					}
					if err := insertRuns(ctx, db, table, day0, next, next+500, perDay, partitionDays); err != nil {
						written <- -1
						return
					}
					n, next = n+500, next+500
				}
			}()
			cut := day0 + dayMS
			c, w, err = cpu(func() error {
				if partitioned {
					_, err := db.ExecContext(ctx, "ALTER TABLE "+table+" DROP PARTITION p0")
					return err
				}
				for {
					res, err := db.ExecContext(ctx, "DELETE FROM "+table+" WHERE scheduled_at < ? ORDER BY scheduled_at LIMIT 1000", cut)
					if err != nil {
						return err
					}
					if n, _ := res.RowsAffected(); n == 0 {
						return nil
					}
				}
			})
			close(stop)
			n := <-written
			if err != nil || n < 0 {
				b.Fatalf("pruning %s: %v (concurrent writer: %d)", kind, err, n)
			}
			var left int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE scheduled_at < ?", cut).Scan(&left); err != nil || left != 0 {
				b.Fatalf("%s: %d rows of the pruned day left (%v)", kind, left, err)
			}
			s.Add(kind+": prune a day, server ms", float64(c.Microseconds())/1e3)
			s.Add(kind+": prune a day, wall ms", float64(w.Microseconds())/1e3)
			s.Add(kind+": inserts/s beside the prune", float64(n)/w.Seconds())
			if _, err := db.ExecContext(ctx, "DROP TABLE "+table); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Printed, not logged: the testing package cuts a benchmark's log short.
	fmt.Printf("day partitions: %d run rows a day over %d days, %d iteration(s); medians and spread:\n%s", perDay, partitionDays, b.N, s.Table())
}
