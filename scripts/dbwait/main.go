// Command dbwait waits until a MySQL/MariaDB server accepts a DSN, for scripts/test.sh. It
// exits 0 once a ping succeeds and 1 when the timeout passes.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql"
)

func main() {
	dsn := flag.String("dsn", "root:@tcp(127.0.0.1:3306)/", "go-sql-driver DSN")
	timeout := flag.Duration("timeout", 0, "keep trying this long (0: one try)")
	flag.Parse()
	deadline := time.Now().Add(*timeout)
	for {
		err := ping(*dsn)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "dbwait:", err)
			os.Exit(1)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func ping(dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}
