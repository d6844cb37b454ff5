package main

import (
	"flag"
	"fmt"

	"github.com/axe-sched/axe/lib/cron"
)

// serverDialect returns the engine's CronDialect for the --cron-dialect flag: the dialect
// when the flag (or AXE_CRON_DIALECT) was given, "" when it was left at its default, which
// tells the engine to refuse expressions unix cron and Quartz read differently.
func serverDialect(fs *flag.FlagSet, value string) (string, error) {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "cron-dialect" })
	d, err := cron.ParseDialect(value)
	if err != nil {
		return "", fmt.Errorf("cron-dialect: must be unix or quartz, got %q", value)
	}
	if !set {
		return "", nil
	}
	return string(d), nil
}
