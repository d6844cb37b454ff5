package persist_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestCheckTaskDefAgreesWithMySQL holds CheckTaskDef to the real MySQL server, the stricter
// store: a definition it passes is stored, and one the server refuses it refuses too. Each
// case puts one field near its column's limit, in characters of one to four bytes or with a
// byte that is not UTF-8. (CheckTaskDef is stricter in one place: MariaDB stores the bytes of
// a UTF-16 surrogate, which are not UTF-8 and which it refuses too.)
func TestCheckTaskDefAgreesWithMySQL(t *testing.T) {
	t.Parallel()
	s := persisttest.MySQL(t)
	var n, stored, refused atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		ctx := testCtx(t)
		id := n.Add(1)
		def := newTestDef(fmt.Sprintf("c%d", id), "")
		def.Trigger, def.Cron, def.CronDialect = model.TriggerCron, "* * * * *", "unix"
		unit := rapid.SampledFrom([]string{"a", "é", "語", "😀", "\xff", "\xed\xa0\x80"}).Draw(rt, "unit")
		fill := func(limit int) string {
			n := rapid.IntRange(max(0, limit-3), limit+3).Draw(rt, "length")
			return strings.Repeat("a", max(0, n-1)) + unit
		}
		field := rapid.SampledFrom([]string{"name", "group", "cron", "timezone", "sensitive_params", "callback", "timeout_sec"}).Draw(rt, "field")
		switch field {
		case "name":
			def.Name = fmt.Sprintf("c%d-", id) + fill(255-len(fmt.Sprintf("c%d-", id)))
		case "group":
			def.Group = fill(255)
		case "cron":
			def.Cron = fill(255)
		case "timezone":
			def.Timezone = fill(64)
		case "sensitive_params":
			def.SensitiveParams = []string{fill(4096 - 4)} // ["…"]
		case "callback":
			def.Callback.URL = "http://h/" + fill(65535-len(`{"type":"http","url":"http://h/"}`))
		case "timeout_sec":
			def.TimeoutSec = rapid.SampledFrom([]int{math.MaxInt32, math.MaxInt32 + 1, math.MinInt32, math.MinInt32 - 1}).Draw(rt, "value")
		}
		checked := persist.CheckTaskDef(def)
		var ce *persist.ColumnError
		if checked != nil && (!errors.As(checked, &ce) || !errors.Is(checked, persist.ErrRejected) || ce.Field != field) {
			rt.Fatalf("CheckTaskDef = %v, want a ColumnError naming %s", checked, field)
		}
		err := s.ApplyBatch(ctx, &persist.Batch{Creates: []*persist.TaskCreate{{Def: def, Runtime: model.Runtime{State: model.StateWaiting}}}})
		surrogate := unit == "\xed\xa0\x80" && field != "timeout_sec"
		switch {
		case checked == nil && err != nil:
			rt.Fatalf("CheckTaskDef passed %s, which MySQL refused: %v", field, err)
		case checked != nil && err == nil && !surrogate:
			rt.Fatalf("CheckTaskDef refused %s (%v), which MySQL stored", field, checked)
		case err == nil:
			stored.Add(1)
		default:
			refused.Add(1)
		}
	})
	if stored.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("%d definitions stored and %d refused: the cases did not reach both sides of the limits", stored.Load(), refused.Load())
	}
	t.Logf("%d definitions stored, %d refused by MySQL and by CheckTaskDef alike", stored.Load(), refused.Load())
}
