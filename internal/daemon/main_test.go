package daemon_test

import (
	"testing"

	"github.com/axe-sched/axe/internal/test/daemontest"
)

func TestMain(m *testing.M) { daemontest.Main(m) }
