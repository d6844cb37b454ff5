package benchkit

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat CPU times. It is 100 on every Linux
// architecture Go supports; reading sysconf(_SC_CLK_TCK) would need cgo.
const clockTicks = 100

// RSS returns this process's resident set size in bytes, from /proc/self/statm.
func RSS() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, fmt.Errorf("cannot read RSS: %w: %w", ErrNoProcStat, err)
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("cannot parse /proc/self/statm %q", b)
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cannot parse /proc/self/statm %q: %w", b, err)
	}
	return pages * int64(os.Getpagesize()), nil
}

// CPUTime returns the user plus system CPU time this process has used (getrusage).
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcessCPU returns the user plus system CPU time process pid has used, from
// /proc/<pid>/stat.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cannot read CPU time of process %d: %w: %w", pid, ErrNoProcStat, err)
	}
	// The command name (field 2) may hold spaces; the fields after its closing parenthesis
	// are fixed: utime and stime are the 12th and 13th of them.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("cannot parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("cannot parse /proc/%d/stat", pid)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cannot parse /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// ServerPID returns the pid of the MySQL/MariaDB server db is connected to, read from the
// server's own pid file (@@pid_file), or 0 when that file is not readable here (a server on
// another host or in a container). The suites use it to read the server's CPU; matching
// process names instead picks the wrong server when a machine runs two.
func ServerPID(ctx context.Context, db *sql.DB) int {
	var file string
	if err := db.QueryRowContext(ctx, `SELECT @@pid_file`).Scan(&file); err != nil || file == "" {
		return 0
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		return 0
	}
	return pid
}

// LoadAverage returns /proc/loadavg's three averages as text, or "" when unavailable.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// MemTotal returns the machine's memory in bytes from /proc/meminfo, or 0 when unavailable.
func MemTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}
