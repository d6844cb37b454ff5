package daemon_test

import (
	"testing"

	"github.com/axe-sched/axe/internal/daemontest"
)

func TestMain(m *testing.M) { daemontest.Main(m) }
