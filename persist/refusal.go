package persist

import (
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/axe-sched/axe/model"
)

// RejectedError fails a group whose rows the database refused for what they hold: a value
// that is not valid UTF-8, a string longer than its column, a number out of its column's
// range. Such a refusal is deterministic: the same rows are refused however often they are
// sent, so the writer fails the group at once instead of retrying it (Writer, "Refusals").
// It unwraps to ErrRejected and to the database's error.
type RejectedError struct {
	Err error
}

func (e *RejectedError) Error() string { return "the store refused the write: " + e.Err.Error() }

// Unwrap makes errors.Is(err, ErrRejected) true and keeps the database's error reachable.
func (e *RejectedError) Unwrap() []error { return []error{ErrRejected, e.Err} }

// ColumnError is what CheckTaskDef finds the store would refuse: Field is the API field at
// fault. It unwraps to ErrRejected.
type ColumnError struct {
	Field string
	Msg   string
}

func (e *ColumnError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes errors.Is(err, ErrRejected) true.
func (e *ColumnError) Unwrap() error { return ErrRejected }

// MySQL error numbers of a value the server refuses in strict mode, whatever the moment: the
// statement fails the same way each time it runs with the same values.
var mysqlRefusals = map[uint16]bool{
	1048: true, // ER_BAD_NULL_ERROR: a NULL into a NOT NULL column
	1062: true, // ER_DUP_ENTRY that survived ApplyBatch's own handling of taken names
	1153: true, // ER_NET_PACKET_TOO_LARGE: a statement over max_allowed_packet
	1264: true, // ER_WARN_DATA_OUT_OF_RANGE
	1265: true, // WARN_DATA_TRUNCATED
	1292: true, // ER_TRUNCATED_WRONG_VALUE
	1300: true, // ER_INVALID_CHARACTER_STRING
	1366: true, // ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: "Incorrect string value" (invalid UTF-8)
	1367: true, // ER_ILLEGAL_VALUE_FOR_TYPE
	1406: true, // ER_DATA_TOO_LONG
	1644: true, // ER_SIGNAL_EXCEPTION: a trigger refusing the row
	3140: true, // ER_INVALID_JSON_TEXT
	4025: true, // ER_CONSTRAINT_FAILED (MariaDB CHECK)
}

// isRefusal reports whether err is the database refusing the values a write carries rather
// than failing to take them (down, unreachable, a deadlock, a full disk, a schema it does not
// have): retrying a refusal cannot succeed, while those others may. A statement the MySQL
// driver will not send (larger than its max_allowed_packet) counts as refused.
func isRefusal(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return mysqlRefusals[me.Number]
	}
	if errors.Is(err, mysql.ErrPktTooLarge) {
		return true
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		// The primary code is the low byte of an extended one (SQLITE_CONSTRAINT_UNIQUE…,
		// SQLITE_CONSTRAINT_TRIGGER for a trigger refusing the row).
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH:
			return true
		}
	}
	return false
}

// column is what one column of task_def holds, in MySQL's terms (the stricter store): a
// VARCHAR counts characters, a TEXT bytes. SQLite holds anything; a definition is held to
// these limits on both stores, so that one that works on SQLite moves to MySQL.
type column struct {
	field string // the API field it stores
	chars int    // VARCHAR(chars), when > 0
	bytes int    // TEXT of bytes, when > 0
	int32 bool   // INT
}

// defColumns are the limits of task_def's columns (schema.go), by name.
var defColumns = map[string]column{
	"name":                 {field: "name", chars: nameLen},
	"grp":                  {field: "group", chars: nameLen},
	"trigger_type":         {field: "trigger", chars: shortLen},
	"cron":                 {field: "cron", chars: 255},
	"depends_on":           {field: "depends_on", bytes: textLen},
	"depends_mode":         {field: "depends_mode", chars: shortLen},
	"timezone":             {field: "timezone", chars: 64},
	"timeout_sec":          {field: "timeout_sec", int32: true},
	"retry_count":          {field: "retry_count", int32: true},
	"retry_interval_sec":   {field: "retry_interval_sec", int32: true},
	"priority":             {field: "priority", int32: true},
	"callback":             {field: "callback", bytes: textLen},
	"params":               {field: "params", bytes: 1<<24 - 1}, // MEDIUMTEXT
	"misfire_policy":       {field: "misfire_policy", chars: shortLen},
	"on_lost":              {field: "on_lost", chars: shortLen},
	"cron_dialect":         {field: "cron_dialect", chars: shortLen},
	"sensitive_params":     {field: "sensitive_params", chars: 4096},
	"pause_after_failures": {field: "pause_after_failures", int32: true},
	"jitter_sec":           {field: "jitter_sec", int32: true},
	"concurrency_key":      {field: "concurrency_key", chars: nameLen},
	"rate_key":             {field: "rate_key", chars: nameLen},
	"overlap_policy":       {field: "overlap_policy", chars: shortLen},
	"catchup_window_sec":   {field: "catchup_window_sec", int32: true},
}

// CheckTaskDef reports what of def the store would refuse, before it is written: every
// string of its row must be valid UTF-8 (a surrogate's bytes are not) and fit its column,
// and every INT column's value its range. The error names the API field ("callback",
// "sensitive_params") and wraps ErrRejected. It checks the row exactly as a create or an
// update writes it, so a definition it passes is never refused for its values.
func CheckTaskDef(def *model.TaskDef) error {
	row, deps, err := encodeDef(def)
	if err != nil {
		return err
	}
	for i, v := range row {
		col, ok := defColumns[defCols[i]]
		if !ok {
			continue
		}
		if err := col.check(v); err != nil {
			return err
		}
	}
	for _, up := range deps { // task_dep.upstream_name
		if err := (column{field: "depends_on", chars: nameLen}).check(up); err != nil {
			return err
		}
	}
	return nil
}

// check reports whether v fits c.
func (c column) check(v any) error {
	switch v := v.(type) {
	case string:
		switch {
		case !utf8.ValidString(v):
			return &ColumnError{Field: c.field, Msg: "is not valid UTF-8"}
		case c.bytes > 0 && len(v) > c.bytes:
			return &ColumnError{Field: c.field, Msg: fmt.Sprintf("is %d bytes as stored, over the %d its column holds", len(v), c.bytes)}
		case c.chars > 0 && len(v) > c.chars && utf8.RuneCountInString(v) > c.chars:
			return &ColumnError{Field: c.field, Msg: fmt.Sprintf("is %d characters as stored, over the %d its column holds", utf8.RuneCountInString(v), c.chars)}
		}
	case int:
		if c.int32 && (v < math.MinInt32 || v > math.MaxInt32) {
			return &ColumnError{Field: c.field, Msg: fmt.Sprintf("%d is out of the range its column holds", v)}
		}
	}
	return nil
}
